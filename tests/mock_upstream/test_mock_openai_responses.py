"""Responses API streams through the real openai SDK, over a real socket."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from mock_support import LiveServer, scenario_header

pytestmark = pytest.mark.sockets

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def events_of(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
    kwargs.setdefault("input", "Tell me about streaming.")
    with client.responses.create(model="mock-gpt", stream=True, **kwargs) as stream:
        return list(stream)


def test_final_response_through_the_stream_helper(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    with openai_client.responses.stream(model="mock-gpt", input="Tell me about streaming.") as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        response = s.get_final_response()
    assert response.status == "completed"
    assert response.output_text == "".join(deltas)
    assert response.usage is not None and response.usage.output_tokens == 24
    record = server.wait_until_idle()[-1]
    assert (record["id"], record["api"], record["state"]) == (response.id, "responses", "completed")


def test_every_event_has_a_sequence_number_and_created_comes_first(
    openai_client: openai.OpenAI,
) -> None:
    events = events_of(openai_client)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    kinds = [e.type for e in events]
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    assert kinds[-1] == "response.completed"


def test_same_request_twice_gives_the_same_text(openai_client: openai.OpenAI) -> None:
    def text() -> str:
        return "".join(
            e.delta for e in events_of(openai_client) if e.type == "response.output_text.delta"
        )

    assert text() == text()


def test_function_call_arguments_stream_as_deltas(openai_client: openai.OpenAI) -> None:
    with openai_client.responses.stream(
        model="mock-gpt", input="Weather?", tools=[WEATHER]
    ) as stream:
        deltas = [e for e in stream if e.type == "response.function_call_arguments.delta"]
        response = stream.get_final_response()
    call = response.output[0]
    assert call.type == "function_call"
    assert call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city"}
    assert len(deltas) >= 2


def test_max_output_tokens_ends_with_response_incomplete(openai_client: openai.OpenAI) -> None:
    last = events_of(openai_client, max_output_tokens=5)[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 5


def test_refusal_after_ends_with_response_incomplete_content_filter(
    openai_client: openai.OpenAI,
) -> None:
    last = events_of(openai_client, extra_headers=scenario_header(refusal_after=3))[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "content_filter"


def test_error_after_ends_with_response_failed_and_no_final_response(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    last = events_of(openai_client, extra_headers=scenario_header(error_after=3))[-1]
    assert last.type == "response.failed"
    assert last.response.error.code == "server_error"
    with (
        openai_client.responses.stream(
            model="mock-gpt", input="x", extra_headers=scenario_header(error_after=3)
        ) as stream,
        pytest.raises(RuntimeError, match=r"response\.completed"),
    ):
        for _ in stream:
            pass
        stream.get_final_response()
    assert server.wait_until_idle()[-1]["state"] == "errored"


def test_drop_after_raises_api_connection_error(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIConnectionError):
        events_of(openai_client, extra_headers=scenario_header(drop_after=3))


def test_unary_response_has_the_streamed_text(openai_client: openai.OpenAI) -> None:
    streamed = "".join(
        e.delta for e in events_of(openai_client) if e.type == "response.output_text.delta"
    )
    response = openai_client.responses.create(model="mock-gpt", input="Tell me about streaming.")
    assert response.output_text == streamed
