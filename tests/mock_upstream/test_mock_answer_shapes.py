"""The answer-shape keys (``filler_tokens``, ``separator_tokens``, ``preamble_tokens``,
``thinking_tokens``) and the Responses refusal said in ``response.refusal.delta`` events
(``refusal_deltas``), through the real SDKs over a real socket."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from mock_support import USER, LiveServer, scenario_header
from test_mock_openai_chat import TIME, WEATHER

from mock_upstream.anthropic_messages import signature
from mock_upstream.openai_responses import REFUSAL
from mock_upstream.tokenizer import count_tokens

pytestmark = pytest.mark.sockets

ANTHROPIC_WEATHER = {
    "name": "get_weather",
    "input_schema": WEATHER["function"]["parameters"],  # type: ignore[index]
}


def events(server: LiveServer, route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = server.client.post(route, json={"stream": True, **body})
    assert response.status_code == 200, response.text
    return [
        json.loads(line[5:])
        for line in response.text.split("\n")
        if line.startswith("data:") and line[5:].strip() != "[DONE]"
    ]


# -- filler_tokens -----------------------------------------------------------------------------


def test_a_filler_opening_is_blank_tokens_counted_as_completion_tokens(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    pieces: list[str] = []
    with openai_client.chat.completions.create(
        model="mock-gpt",
        messages=USER,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=scenario_header(tokens=20, filler_tokens=6, seed=3),
    ) as stream:
        usage = None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            usage = chunk.usage or usage
    text = "".join(pieces)
    opening = text[: len(text) - len(text.lstrip(" \n."))]
    assert count_tokens(opening) == 6 and not any(c.isalnum() for c in opening)
    assert text[len(opening)].isupper()  # the prose starts with its first word, no space lost
    assert usage is not None and usage.completion_tokens == 20 == count_tokens(text)
    assert server.last()["tokens_generated"] == 20


def test_filler_never_takes_the_whole_answer(openai_client: openai.OpenAI) -> None:
    with openai_client.chat.completions.create(
        model="mock-gpt",
        messages=USER,
        stream=True,
        extra_headers=scenario_header(tokens=3, filler_tokens=10),
    ) as stream:
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert count_tokens(text) == 3 and any(c.isalnum() for c in text)


# -- separator_tokens --------------------------------------------------------------------------

UNICODE_LINE_ENDS = ("\u2028", "\u2029", "\x85")


def test_separator_tokens_reach_the_wire_raw_inside_one_data_line(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    response = server.client.post(
        "/v1/chat/completions",
        json={"model": "mock-gpt", "messages": USER, "stream": True},
        headers=scenario_header(tokens=20, separator_tokens=7, seed=3),
    )
    raw = response.content.decode()
    for end in UNICODE_LINE_ENDS:
        assert end in raw  # raw UTF-8, not a \u escape: as llama.cpp writes JSON
    # Split as SSE splits (CR and LF only): every line is a field, each data line whole JSON.
    lines = [line for line in raw.replace("\r\n", "\n").split("\n") if line]
    assert all(line.startswith("data:") for line in lines)
    texts = [
        json.loads(line[5:])["choices"][0]["delta"].get("content") or ""
        for line in lines
        if line[5:].strip() != "[DONE]"
    ]
    text = "".join(texts)
    assert count_tokens(text) == 20 == server.last()["tokens_generated"]
    # What str.splitlines makes of the same body: more lines than SSE has, some not fields.
    assert len(raw.splitlines()) > len(raw.split("\n"))


# -- preamble_tokens and thinking_tokens --------------------------------------------------------


def test_a_preamble_comes_before_the_tool_calls_on_chat(openai_client: openai.OpenAI) -> None:
    with openai_client.chat.completions.stream(
        model="mock-gpt",
        messages=USER,
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        extra_headers=scenario_header(preamble_tokens=8),
    ) as stream:
        completion = stream.get_final_completion()
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "tool_calls"
    assert message.content and count_tokens(message.content) == 8
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather", "get_time"]


def test_thinking_text_and_tool_use_arrive_in_one_turn_for_the_anthropic_sdk(
    anthropic_client: anthropic.Anthropic, server: LiveServer
) -> None:
    headers = scenario_header(thinking_tokens=12, preamble_tokens=6)
    with anthropic_client.messages.stream(
        model="mock-claude",
        max_tokens=500,
        messages=USER,  # type: ignore[arg-type]
        tools=[ANTHROPIC_WEATHER],  # type: ignore[list-item]
        extra_headers=headers,
    ) as stream:
        kinds = [(e.index, e.delta.type) for e in stream if e.type == "content_block_delta"]
        message = stream.get_final_message()
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    thinking = message.content[0]
    assert thinking.type == "thinking" and count_tokens(thinking.thinking) == 12
    assert thinking.signature == signature(thinking.thinking)
    assert sorted(set(kinds)) == [
        (0, "signature_delta"),
        (0, "thinking_delta"),
        (1, "text_delta"),
        (2, "input_json_delta"),
    ]
    assert kinds.index((0, "signature_delta")) == max(
        n for n, kind in enumerate(kinds) if kind[0] == 0
    )  # the signature closes its block
    tokens = (
        12
        + 6
        + sum(count_tokens(json.dumps(b.input)) for b in message.content if b.type == "tool_use")
    )
    assert message.usage.output_tokens == tokens == server.last()["tokens_generated"]
    assert message.stop_reason == "tool_use"


def test_the_unary_message_carries_the_thinking_block(server: LiveServer) -> None:
    body = {"model": "mock-claude", "max_tokens": 100, "messages": USER}
    response = server.client.post(
        "/v1/messages", json=body, headers=scenario_header(thinking_tokens=5)
    )
    blocks = response.json()["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert blocks[0]["signature"] == signature(blocks[0]["thinking"])


def test_thinking_tokens_is_a_400_outside_the_messages_route(server: LiveServer) -> None:
    body = {"model": "mock-gpt", "messages": USER, "stream": True, "mock": {"thinking_tokens": 4}}
    response = server.client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "thinking_tokens changes the Anthropic Messages wire only" in message
    assert "send it to /v1/messages" in message


# -- refusal_deltas -----------------------------------------------------------------------------


def test_a_responses_refusal_is_said_in_refusal_deltas_after_the_text(
    openai_client: openai.OpenAI,
) -> None:
    with openai_client.responses.stream(
        model="mock-gpt",
        input="Tell me about streaming.",
        extra_headers=scenario_header(refusal_after=5, refusal_deltas=1),
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.refusal.delta"]
        response = stream.get_final_response()
    assert "".join(deltas) == REFUSAL and len(deltas) == count_tokens(REFUSAL)
    assert response.status == "completed"
    content = response.output[0].content  # type: ignore[union-attr]
    assert [part.type for part in content] == ["output_text", "refusal"]
    assert count_tokens(content[0].text) == 5  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.output_tokens == 5


def test_a_refusal_before_any_text_is_a_message_of_its_own(server: LiveServer) -> None:
    sent = events(
        server,
        "/v1/responses",
        {"model": "mock-gpt", "input": "Hi", "mock": {"refusal_after": 0, "refusal_deltas": True}},
    )
    kinds = [e["type"] for e in sent]
    assert "response.output_text.delta" not in kinds
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))
    item = sent[-1]["response"]["output"][0]
    assert item["content"][-1] == {"type": "refusal", "refusal": REFUSAL}


def test_without_refusal_deltas_a_responses_refusal_is_incomplete(server: LiveServer) -> None:
    sent = events(
        server, "/v1/responses", {"model": "mock-gpt", "input": "Hi", "mock": {"refusal_after": 3}}
    )
    assert sent[-1]["type"] == "response.incomplete"
    assert not any(e["type"] == "response.refusal.delta" for e in sent)
