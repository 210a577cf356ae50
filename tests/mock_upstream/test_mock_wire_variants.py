"""The wire variants (``comment_every_ms``, ``usage_with_choices``, ``interleave_tools``,
``done_after_error``) and ``error_after=0``, through the real SDKs over a real socket.

Each variant frames the same answer as some real server frames it; a client that follows the
protocol reads the same text, counts and tool calls either way.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from mock_support import USER, LiveServer, scenario_header
from test_mock_openai_chat import TIME, WEATHER, stream_text

from mock_upstream.scenario import ScenarioError, parse_body, parse_header


def raw_lines(server: LiveServer, mock: dict[str, Any], **body: Any) -> list[str]:
    """The stream's non-empty lines, as sent."""
    request = {"model": "mock-gpt", "messages": USER, "stream": True, "mock": mock, **body}
    response = server.client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200
    return [line for line in response.text.split("\n") if line]


# -- comment_every_ms ------------------------------------------------------------------------


@pytest.mark.sockets
def test_comments_arrive_before_the_first_token_and_between_tokens(server: LiveServer) -> None:
    lines = raw_lines(server, {"ttft_ms": 300, "tps": 10, "tokens": 5, "comment_every_ms": 50})
    first_data = next(n for n, line in enumerate(lines) if line.startswith("data:"))
    assert first_data >= 4  # comments at 50, 100, ..., 250 ms before the first token at 300
    assert all(line == ": MOCK-UPSTREAM PROCESSING" for line in lines[:first_data])
    after = [line for line in lines[first_data:] if line.startswith(":")]
    assert len(after) >= 4  # 400 ms of tokens at 10/s: a comment every 50 ms in between


@pytest.mark.sockets
def test_the_openai_sdk_reads_the_same_text_with_comments(openai_client: openai.OpenAI) -> None:
    plain, _ = stream_text(openai_client, extra_headers=scenario_header(seed=7))
    commented, _ = stream_text(
        openai_client, extra_headers=scenario_header(seed=7, comment_every_ms=1)
    )
    assert commented == plain and plain


@pytest.mark.sockets
def test_the_anthropic_sdk_reads_a_stream_with_comments(
    anthropic_client: anthropic.Anthropic,
) -> None:
    headers = scenario_header(ttft_ms=100, comment_every_ms=20)
    with anthropic_client.messages.stream(
        model="mock-claude", max_tokens=100, messages=USER, extra_headers=headers
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn" and message.content


@pytest.mark.sockets
def test_comments_keep_coming_through_a_stall(server: LiveServer) -> None:
    mock = {"tps": 1000, "tokens": 6, "stall_after": 3, "stall_s": 0.5, "comment_every_ms": 100}
    lines = raw_lines(server, mock)
    contents = [n for n, line in enumerate(lines) if '"content":"' in line and "role" not in line]
    between = [line for line in lines[contents[0] : contents[-1]] if line.startswith(":")]
    assert len(between) >= 3  # a 500 ms silence, a comment every 100 ms


# -- usage_with_choices ----------------------------------------------------------------------


@pytest.mark.sockets
def test_usage_rides_on_the_finish_chunk_which_still_has_choices(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    _, chunks = stream_text(
        openai_client,
        stream_options={"include_usage": True},
        extra_headers=scenario_header(usage_with_choices=1),
    )
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.choices for c in chunks)  # no `choices: []` chunk at all
    record = server.wait_until_idle()[-1]
    assert with_usage[0].usage.completion_tokens == record["completion_tokens"] == 24
    assert with_usage[0].usage.prompt_tokens == record["prompt_tokens"]


@pytest.mark.sockets
def test_usage_with_choices_sends_no_usage_to_a_client_that_did_not_ask(
    server: LiveServer,
) -> None:
    lines = raw_lines(server, {"usage_with_choices": True})
    assert lines[-1] == "data: [DONE]"
    assert not any('"usage"' in line for line in lines)


# -- interleave_tools ------------------------------------------------------------------------


def tool_deltas(chunks: list[Any]) -> list[Any]:
    return [
        call
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
        for call in c.choices[0].delta.tool_calls
    ]


@pytest.mark.sockets
def test_interleaved_tool_call_deltas_take_turns_by_index(openai_client: openai.OpenAI) -> None:
    _, chunks = stream_text(
        openai_client, tools=[WEATHER, TIME], extra_headers=scenario_header(interleave_tools=1)
    )
    indexes = [d.index for d in tool_deltas(chunks)]
    assert indexes[:4] == [0, 0, 1, 1]  # call 0's header and first fragment, then call 1's
    assert indexes[4:6] == [0, 1]
    headers = [d for d in tool_deltas(chunks) if d.id]
    assert [(d.index, d.function.name) for d in headers] == [(0, "get_weather"), (1, "get_time")]


@pytest.mark.sockets
def test_the_stream_helper_assembles_interleaved_calls_like_sequential_ones(
    openai_client: openai.OpenAI,
) -> None:
    def calls(**scenario: object) -> list[tuple[str, dict[str, Any]]]:
        with openai_client.chat.completions.stream(
            model="mock-gpt",
            messages=USER,
            tools=[WEATHER, TIME],
            extra_headers=scenario_header(seed=3, **scenario),
        ) as stream:
            completion = stream.get_final_completion()
        made = completion.choices[0].message.tool_calls or []
        assert len({c.id for c in made}) == len(made)
        return [(c.function.name, json.loads(c.function.arguments)) for c in made]

    interleaved = calls(interleave_tools=1)
    assert interleaved == calls()
    assert [name for name, _ in interleaved] == ["get_weather", "get_time"]


@pytest.mark.sockets
def test_wire_variants_of_chat_are_a_400_on_the_other_apis(server: LiveServer) -> None:
    response = server.client.post(
        "/v1/messages",
        json={"model": "mock-claude", "max_tokens": 10, "messages": USER, "stream": True},
        headers=scenario_header(interleave_tools=1),
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "interleave_tools changes the Chat Completions wire only" in error["message"]


# -- error_after=0 and done_after_error ------------------------------------------------------


@pytest.mark.sockets
def test_error_after_zero_is_the_first_event_of_the_200(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    lines = raw_lines(server, {"error_after": 0})
    assert len(lines) == 1 and json.loads(lines[0].removeprefix("data: "))["error"]
    seen: list[Any] = []
    with pytest.raises(openai.APIError) as caught:
        with openai_client.chat.completions.create(
            model="mock-gpt",
            messages=USER,
            stream=True,
            extra_headers=scenario_header(error_after=0),
        ) as stream:
            seen.extend(stream)
    assert not isinstance(caught.value, openai.APIStatusError) and seen == []
    record = server.wait_until_idle()[-1]
    assert (record["state"], record["tokens_generated"]) == ("errored", 0)


@pytest.mark.sockets
def test_done_after_error_ends_like_vllm_and_the_sdk_still_raises(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    lines = raw_lines(server, {"error_after": 3, "done_after_error": True})
    assert '"error"' in lines[-2] and lines[-1] == "data: [DONE]"
    with pytest.raises(openai.APIError):
        stream_text(openai_client, extra_headers=scenario_header(error_after=0, done_after_error=1))


@pytest.mark.sockets
def test_anthropic_error_first_raises_overloaded_before_message_start(
    anthropic_client: anthropic.Anthropic, server: LiveServer
) -> None:
    response = server.client.post(
        "/v1/messages",
        json={"model": "mock-claude", "max_tokens": 10, "messages": USER, "stream": True},
        headers=scenario_header(error_after=0),
    )
    assert response.text.startswith("event: error\n")
    with pytest.raises(anthropic.APIStatusError) as caught:
        with anthropic_client.messages.stream(
            model="mock-claude",
            max_tokens=10,
            messages=USER,
            extra_headers=scenario_header(error_after=0),
        ) as stream:
            stream.get_final_message()
    assert caught.value.status_code == 200


@pytest.mark.sockets
def test_responses_error_first_still_opens_with_response_created(server: LiveServer) -> None:
    response = server.client.post(
        "/v1/responses",
        json={"model": "mock-gpt", "input": "x", "stream": True},
        headers=scenario_header(error_after=0),
    )
    events = [line[7:] for line in response.text.split("\n") if line.startswith("event: ")]
    assert events == ["response.created", "response.in_progress", "response.failed"]


# -- parsing ---------------------------------------------------------------------------------


def test_switches_take_booleans_and_their_header_spellings() -> None:
    assert parse_header("usage_with_choices=1;interleave_tools=true;done_after_error=off") == {
        "usage_with_choices": True,
        "interleave_tools": True,
        "done_after_error": False,
    }
    assert parse_body({"usage_with_choices": True}) == {"usage_with_choices": True}
    with pytest.raises(ScenarioError, match="expected true or false"):
        parse_header("interleave_tools=maybe")
    with pytest.raises(ScenarioError, match="expected an integer >= 1"):
        parse_header("comment_every_ms=0")
