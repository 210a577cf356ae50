"""``end_after``: the body ends cleanly after N tokens with no terminal event, on every API.

Unlike ``drop_after`` (the connection breaks: the chunked body never gets its last chunk), the
response is whole and the connection sound; only the terminal event is missing: no
``data: [DONE]``, no ``response.completed``, no ``message_stop``. What each SDK makes of it is
pinned here, because it is why a proxy must require the terminal event itself: the openai SDK's
Chat stream and the anthropic SDK's ``get_final_message`` both end without an error.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from mock_support import USER, LiveServer, scenario_header

from labkit.sse import SSEDecoder, SSEEvent

pytestmark = pytest.mark.sockets

ROUTES: dict[str, dict[str, Any]] = {
    "chat": {"model": "mock-gpt", "messages": USER, "stream": True},
    "responses": {"model": "mock-gpt", "input": "Tell me about streaming.", "stream": True},
    "messages": {"model": "mock-claude", "max_tokens": 1000, "messages": USER, "stream": True},
}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
TERMINAL = {"[DONE]", "response.completed", "message_stop"}


def whole_body(server: LiveServer, api: str, end_after: int) -> list[SSEEvent]:
    """Stream one answer to its end with plain httpx (which raises on a broken chunked body)."""
    with server.client.stream(
        "POST", PATHS[api], json=ROUTES[api], headers=scenario_header(end_after=end_after)
    ) as response:
        assert response.status_code == 200
        decoder = SSEDecoder()
        items = [item for data in response.iter_bytes() for item in decoder.decode(data)]
    return [item for item in items if isinstance(item, SSEEvent)]


@pytest.mark.parametrize("api", list(ROUTES))
def test_the_body_ends_whole_with_no_terminal_event(api: str, server: LiveServer) -> None:
    events = whole_body(server, api, end_after=3)
    names = {event.data for event in events} | {event.event for event in events}
    assert events and not names & TERMINAL, names & TERMINAL
    record = server.wait_until_idle()[-1]
    assert (record["api"], record["state"], record["tokens_generated"]) == (api, "errored", 3)


@pytest.mark.parametrize("api", list(ROUTES))
def test_without_the_fault_the_same_answer_ends_with_its_terminal_event(
    api: str, server: LiveServer
) -> None:
    with server.client.stream("POST", PATHS[api], json=ROUTES[api]) as response:
        decoder = SSEDecoder()
        items = [item for data in response.iter_bytes() for item in decoder.decode(data)]
    last = [item for item in items if isinstance(item, SSEEvent)][-1]
    assert {last.data, last.event} & TERMINAL


def test_end_after_zero_is_an_empty_body(server: LiveServer) -> None:
    assert whole_body(server, "chat", end_after=0) == []


def test_the_openai_chat_stream_just_stops_without_an_error(
    openai_client: openai.OpenAI, server: LiveServer
) -> None:
    stream = openai_client.chat.completions.create(
        model="mock-gpt", messages=USER, stream=True, extra_headers=scenario_header(end_after=3)
    )
    chunks = list(stream)  # no exception: a short answer, as far as the SDK knows
    assert chunks and all(c.choices[0].finish_reason is None for c in chunks if c.choices)


def test_the_responses_helper_refuses_a_stream_without_response_completed(
    openai_client: openai.OpenAI,
) -> None:
    with (
        openai_client.responses.stream(
            model="mock-gpt", input="Hi", extra_headers=scenario_header(end_after=3)
        ) as stream,
        pytest.raises(RuntimeError, match=r"response\.completed"),
    ):
        for _ in stream:
            pass
        stream.get_final_response()


def test_the_anthropic_helper_returns_a_message_with_no_stop_reason(
    anthropic_client: anthropic.Anthropic,
) -> None:
    with anthropic_client.messages.stream(
        model="mock-claude", max_tokens=1000, messages=USER,
        extra_headers=scenario_header(end_after=3),
    ) as stream:  # fmt: skip
        for _ in stream:
            pass
        message = stream.get_final_message()
    assert message.stop_reason is None and message.content[0].type == "text"


def test_a_unary_answer_with_end_after_is_a_500(server: LiveServer) -> None:
    body = {"model": "mock-gpt", "messages": USER}
    response = server.client.post(
        "/v1/chat/completions", json=body, headers=scenario_header(end_after=3)
    )
    assert response.status_code == 500
    assert isinstance(response, httpx.Response)
