"""Anthropic Messages through the real anthropic SDK, over a real socket."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest
from mock_support import USER, LiveServer, scenario_header

pytestmark = pytest.mark.sockets

WEATHER = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
TIME = {
    "name": "get_time",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}},
}


def final_message(client: anthropic.Anthropic, **kwargs: Any) -> Any:
    kwargs.setdefault("messages", USER)
    with client.messages.stream(model="mock-claude", max_tokens=1000, **kwargs) as stream:
        for _ in stream:
            pass
        return stream.get_final_message()


def test_accumulated_message_has_text_stop_reason_and_usage(
    anthropic_client: anthropic.Anthropic, server: LiveServer
) -> None:
    message = final_message(anthropic_client)
    assert message.content[0].type == "text" and message.content[0].text.strip()
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 24
    assert message.usage.input_tokens > 0
    record = server.wait_until_idle()[-1]
    assert (record["id"], record["api"], record["state"]) == (message.id, "messages", "completed")


def test_stream_has_event_lines_and_a_ping(server: LiveServer) -> None:
    body = {"model": "m", "max_tokens": 100, "messages": USER, "stream": True}
    text = server.client.post("/v1/messages", json=body).text
    frames = [f for f in text.split("\n\n") if f]
    assert all(f.startswith("event: ") for f in frames)
    names = [f.splitlines()[0].removeprefix("event: ") for f in frames]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_same_request_twice_gives_the_same_text(anthropic_client: anthropic.Anthropic) -> None:
    assert final_message(anthropic_client).content[0].text == (
        final_message(anthropic_client).content[0].text
    )


def test_tool_use_blocks_accumulate_from_input_json_deltas(
    anthropic_client: anthropic.Anthropic,
) -> None:
    message = final_message(anthropic_client, tools=[WEATHER, TIME])
    assert message.stop_reason == "tool_use"
    assert [(b.type, b.name) for b in message.content] == [
        ("tool_use", "get_weather"),
        ("tool_use", "get_time"),
    ]
    assert set(message.content[0].input) == {"city"}
    assert message.content[0].id.startswith("toolu_")


def test_max_tokens_stops_with_max_tokens(anthropic_client: anthropic.Anthropic) -> None:
    with anthropic_client.messages.stream(
        model="mock-claude", max_tokens=5, messages=USER
    ) as stream:
        message = stream.get_final_message()
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 5)


def test_refusal_after_stops_with_refusal(anthropic_client: anthropic.Anthropic) -> None:
    message = final_message(anthropic_client, extra_headers=scenario_header(refusal_after=3))
    assert message.stop_reason == "refusal"
    assert message.usage.output_tokens == 3


def test_error_after_raises_api_status_error_200_overloaded(
    anthropic_client: anthropic.Anthropic, server: LiveServer
) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        final_message(anthropic_client, extra_headers=scenario_header(error_after=3))
    assert caught.value.status_code == 200
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert server.wait_until_idle()[-1]["state"] == "errored"


def test_drop_after_lets_a_bare_remote_protocol_error_through(
    anthropic_client: anthropic.Anthropic,
) -> None:
    with pytest.raises(httpx2.RemoteProtocolError):
        final_message(anthropic_client, extra_headers=scenario_header(drop_after=3))


def test_stall_past_the_read_timeout_raises_bare_read_timeout(server: LiveServer) -> None:
    with (
        anthropic.Anthropic(
            base_url=server.url, api_key="sk-mock", max_retries=0, timeout=0.3
        ) as client,
        pytest.raises(httpx2.ReadTimeout),
    ):
        final_message(client, extra_headers=scenario_header(stall_after=2, stall_s=5))


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(429, "rate_limit_error"), (500, "api_error"), (503, "api_error"), (529, "overloaded_error")],
)
def test_status_scenario_gives_anthropic_shaped_error(
    anthropic_client: anthropic.Anthropic, status: int, error_type: str
) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        final_message(anthropic_client, extra_headers=scenario_header(status=status, retry_after=3))
    assert caught.value.status_code == status
    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": error_type, "message": caught.value.body["error"]["message"]},
    }


def test_unary_message_matches_the_stream(anthropic_client: anthropic.Anthropic) -> None:
    streamed = final_message(anthropic_client)
    unary = anthropic_client.messages.create(model="mock-claude", max_tokens=1000, messages=USER)
    assert unary.content[0].text == streamed.content[0].text
    assert unary.stop_reason == "end_turn"
    assert unary.usage.output_tokens == streamed.usage.output_tokens


def test_system_prompt_counts_toward_input_tokens(anthropic_client: anthropic.Anthropic) -> None:
    plain = final_message(anthropic_client)
    with_system = final_message(anthropic_client, system="You are a careful narrator.")
    assert with_system.usage.input_tokens > plain.usage.input_tokens
