"""Chat Completions through the real openai SDK, over a real socket."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from mock_support import USER, LiveServer, scenario_header

pytestmark = pytest.mark.sockets

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}


def stream_text(client: openai.OpenAI, **kwargs: Any) -> tuple[str, list[Any]]:
    kwargs.setdefault("messages", USER)
    text, chunks = "", []
    with client.chat.completions.create(model="mock-gpt", stream=True, **kwargs) as stream:
        for chunk in stream:
            chunks.append(chunk)
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
    return text, chunks


def test_stream_text_parses_and_matches_the_record(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    text, chunks = stream_text(openai_client)
    assert text.strip()
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    record = server.wait_until_idle()[-1]
    assert record["id"] == chunks[0].id
    assert record["api"] == "chat"
    assert record["state"] == "completed"
    assert record["stream"] is True
    assert record["tokens_generated"] == record["completion_tokens"] == 24


def test_include_usage_sends_a_final_chunk_with_empty_choices_and_usage(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    _, chunks = stream_text(openai_client, stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 24
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens == 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert server.last()["include_usage"] is True


def test_chunks_carry_more_than_one_token_so_counting_chunks_undercounts(
    openai_client: openai.OpenAI,
) -> None:
    _, chunks = stream_text(openai_client, stream_options={"include_usage": True})
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[-1].usage is not None
    assert len(content_chunks) < chunks[-1].usage.completion_tokens


def test_same_request_twice_gives_the_same_text_and_counts(openai_client: openai.OpenAI) -> None:
    first = stream_text(openai_client, stream_options={"include_usage": True})
    second = stream_text(openai_client, stream_options={"include_usage": True})
    assert first[0] == second[0]
    assert first[1][-1].usage == second[1][-1].usage
    assert [c.choices[0].delta.content for c in first[1] if c.choices] == [
        c.choices[0].delta.content for c in second[1] if c.choices
    ]


def test_seed_changes_the_text(openai_client: openai.OpenAI) -> None:
    assert stream_text(openai_client, seed=1)[0] != stream_text(openai_client, seed=2)[0]


def test_unary_answer_has_the_same_text_as_the_stream(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    streamed, _ = stream_text(openai_client)
    completion = openai_client.chat.completions.create(model="mock-gpt", messages=USER)
    assert completion.choices[0].message.content == streamed
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == 24
    assert server.last()["stream"] is False
    assert server.last()["state"] == "completed"


def test_max_tokens_cuts_the_answer_with_finish_reason_length(
    openai_client: openai.OpenAI,
) -> None:
    full, _ = stream_text(openai_client)
    text, chunks = stream_text(openai_client, max_tokens=5, stream_options={"include_usage": True})
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert full.startswith(text)


def test_refusal_after_stops_with_content_filter(openai_client: openai.OpenAI) -> None:
    _, chunks = stream_text(openai_client, extra_headers=scenario_header(refusal_after=3))
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "content_filter"


def test_tool_calls_stream_through_the_stream_helper_in_parallel(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    with openai_client.chat.completions.stream(
        model="mock-gpt", messages=USER, tools=[WEATHER, TIME]
    ) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    weather = json.loads(calls[0].function.arguments)
    assert set(weather) == {"city", "days", "unit"}
    assert weather["unit"] in ("celsius", "fahrenheit")
    assert all(c.id.startswith("call_") for c in calls)
    assert server.wait_until_idle()[-1]["state"] == "completed"


def test_first_tool_call_delta_carries_index_id_type_and_name(
    openai_client: openai.OpenAI,
) -> None:
    _, chunks = stream_text(openai_client, tools=[WEATHER])
    deltas = [
        call
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
        for call in c.choices[0].delta.tool_calls
    ]
    first, rest = deltas[0], deltas[1:]
    assert (first.index, first.type) == (0, "function")
    assert first.id and first.function and first.function.name == "get_weather"
    assert len(rest) >= 2
    assert all(d.id is None and d.function and d.function.name is None for d in rest)


def test_tool_choice_picks_one_tool_or_none(openai_client: openai.OpenAI) -> None:
    named = openai_client.chat.completions.create(
        model="mock-gpt",
        messages=USER,
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    assert [c.function.name for c in named.choices[0].message.tool_calls or []] == ["get_time"]
    single = openai_client.chat.completions.create(
        model="mock-gpt", messages=USER, tools=[WEATHER, TIME], parallel_tool_calls=False
    )
    assert len(single.choices[0].message.tool_calls or []) == 1
    none = openai_client.chat.completions.create(
        model="mock-gpt", messages=USER, tools=[WEATHER], tool_choice="none"
    )
    assert none.choices[0].message.content and none.choices[0].finish_reason == "stop"


def test_error_after_raises_api_error_without_status(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    with pytest.raises(openai.APIError) as caught:
        stream_text(openai_client, extra_headers=scenario_header(error_after=4))
    assert not isinstance(caught.value, openai.APIStatusError)
    assert "error_after=4" in caught.value.message
    record = server.wait_until_idle()[-1]
    assert (record["state"], record["tokens_generated"]) == ("errored", 4)


def test_drop_after_raises_api_connection_error(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    with pytest.raises(openai.APIConnectionError) as caught:
        stream_text(openai_client, extra_headers=scenario_header(drop_after=4))
    assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)
    record = server.wait_until_idle()[-1]
    assert (record["state"], record["tokens_generated"]) == ("errored", 4)


def test_stall_past_the_read_timeout_raises_api_timeout_error(server: LiveServer) -> None:
    with (
        openai.OpenAI(
            base_url=server.url + "/v1", api_key="sk-mock", max_retries=0, timeout=0.3
        ) as client,
        pytest.raises(openai.APITimeoutError),
    ):
        stream_text(client, extra_headers=scenario_header(stall_after=3, stall_s=5))
    assert server.wait_until_idle()[-1]["state"] == "cancelled"


def test_short_stall_is_a_pause_then_the_stream_goes_on(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    text, _ = stream_text(openai_client, extra_headers=scenario_header(stall_after=3, stall_s=0.2))
    record = server.wait_until_idle()[-1]
    assert record["state"] == "completed"
    assert record["ended_at"] - record["started_at"] >= 0.2
    assert text == stream_text(openai_client)[0]


def test_malformed_frame_makes_the_sdk_fail_to_decode(openai_client: openai.OpenAI) -> None:
    with pytest.raises(json.JSONDecodeError):
        stream_text(openai_client, extra_headers=scenario_header(malformed_after=2))


def test_malformed_frame_is_one_broken_line_and_the_stream_goes_on(server: LiveServer) -> None:
    body = {"model": "m", "messages": USER, "stream": True, "mock": {"malformed_after": 2}}
    response = server.client.post("/v1/chat/completions", json=body)
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    broken = []
    for payload in data:
        try:
            json.loads(payload)
        except json.JSONDecodeError:
            broken.append(payload)
    assert len(broken) == 2  # the malformed frame, and [DONE]
    assert data[-1] == "[DONE]"


@pytest.mark.parametrize("status", [429, 500, 503, 529])
def test_status_scenario_answers_before_any_stream_with_retry_after(
    openai_client: openai.OpenAI, server: LiveServer, status: int
) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        stream_text(openai_client, extra_headers=scenario_header(status=status, retry_after=7))
    assert caught.value.status_code == status
    assert caught.value.response.headers["retry-after"] == "7"
    body = caught.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    record = server.last()
    assert (record["state"], record["status_code"]) == ("errored", status)


def test_sdk_retries_a_429_twice_so_the_server_sees_three_requests(server: LiveServer) -> None:
    with (
        openai.OpenAI(base_url=server.url + "/v1", api_key="sk-mock", max_retries=2) as client,
        pytest.raises(openai.RateLimitError),
    ):
        client.chat.completions.create(
            model="mock-gpt",
            messages=USER,
            extra_headers=scenario_header(status=429, retry_after=0),
        )
    assert [r["status_code"] for r in server.records()] == [429, 429, 429]
