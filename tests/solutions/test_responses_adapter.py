"""Responses events normalised into chat chunks: the real openai SDK's chat client reads text,
tool calls, usage, refusals and errors that the mock said in the Responses grammar."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from labkit import MockUpstream, capture_stream, serve
from labkit.servers import ServerHandle
from mock_upstream.openai_responses import REFUSAL
from solutions import proxy as parts
from solutions.responses_adapter import make_responses_adapter

pytestmark = pytest.mark.sockets

FAST = {"ttft_ms": 20, "tps": 400, "tokens": 24}
QUESTION = [{"role": "user", "content": "Is my line up?"}]
LINE_TEST = {
    "type": "function",
    "function": {
        "name": "line_test",
        "parameters": {"type": "object", "properties": {"line": {"type": "string"}}},
    },
}
UPTIME = {
    "type": "function",
    "function": {
        "name": "uptime",
        "parameters": {"type": "object", "properties": {"days": {"type": "integer"}}},
    },
}


@pytest.fixture
def sdk(mock: ServerHandle) -> Iterator[openai.OpenAI]:
    with serve(make_responses_adapter(parts, mock.url), name="responses-adapter") as adapter:
        with openai.OpenAI(
            base_url=adapter.url + "/v1", api_key="lab-key", max_retries=0, timeout=10
        ) as client:
            yield client


def ask(sdk: openai.OpenAI, seed: int, **kwargs: Any) -> list[Any]:
    scenario = {**FAST, **kwargs.pop("mock", {}), "seed": seed}
    with sdk.chat.completions.create(
        model="mock-gpt",
        messages=QUESTION,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"mock": scenario},
        **kwargs,
    ) as stream:
        return list(stream)


def test_text_and_usage_arrive_as_chat_chunks(
    sdk: openai.OpenAI, mock: ServerHandle, books: MockUpstream
) -> None:
    chunks = ask(sdk, 1)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    direct = capture_stream(
        mock.url + "/v1/responses",
        json={"model": "mock-gpt", "input": QUESTION, "stream": True, "mock": {**FAST, "seed": 1}},
    )
    assert text == direct.text and text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    record = books.requests()[0]
    assert record["api"] == "responses"
    assert chunks[-1].usage.completion_tokens == record["tokens_generated"] == 24


def test_function_call_arguments_become_tool_call_deltas_by_index(sdk: openai.OpenAI) -> None:
    with sdk.chat.completions.stream(
        model="mock-gpt",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[LINE_TEST, UPTIME],  # type: ignore[list-item]
        extra_body={"mock": {**FAST, "seed": 2}},
    ) as stream:
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["line_test", "uptime"]
    assert [set(json.loads(c.function.arguments)) for c in calls] == [{"line"}, {"days"}]
    assert len({c.id for c in calls}) == 2


def test_a_responses_refusal_reaches_the_chat_client_as_refusal_and_content_filter(
    sdk: openai.OpenAI,
) -> None:
    chunks = ask(sdk, 3, mock={"refusal_after": 6, "refusal_deltas": True})
    choices = [c.choices[0] for c in chunks if c.choices]
    shown = "".join(c.delta.content or "" for c in choices)
    refusal = "".join(c.delta.refusal or "" for c in choices)
    assert refusal == REFUSAL and shown  # six tokens were shown before it
    assert choices[-1].finish_reason == "content_filter"


def test_an_incomplete_refusal_and_a_length_cut_keep_their_finish_reasons(
    sdk: openai.OpenAI,
) -> None:
    refused = ask(sdk, 4, mock={"refusal_after": 6})
    cut = ask(sdk, 4, max_tokens=5)
    assert [c.choices[0].finish_reason for c in refused if c.choices][-1] == "content_filter"
    assert [c.choices[0].finish_reason for c in cut if c.choices][-1] == "length"
    assert cut[-1].usage.completion_tokens == 5


def test_a_failed_response_is_an_error_the_sdk_raises_after_the_text(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.APIError, match="error_after=5"):
        ask(sdk, 5, mock={"error_after": 5})


def test_a_dropped_upstream_is_an_error_not_a_done(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.APIError, match="closed the stream before it finished"):
        ask(sdk, 6, mock={"drop_after": 5})
