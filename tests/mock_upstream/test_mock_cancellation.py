"""A client that leaves mid-stream, or before the first token, stops the generation; so does
one that leaves a whole (unary) answer before it is ready."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import anthropic
import openai
import pytest
from mock_support import USER, LiveServer, raw_request, scenario_header

pytestmark = pytest.mark.sockets

UNARY_ROUTES = pytest.mark.parametrize(
    "route", ["/v1/chat/completions", "/v1/responses", "/v1/messages"]
)
#: A unary hang-up is noticed at once, not at the end of the 20 s answer.
UNARY_MARGIN_S = 0.2

# 20 tokens/s: one token interval is 50 ms; the full answer would take 20 s.
SLOW = {"ttft_ms": 50, "tps": 20, "tokens": 400}
NEVER_FIRST_SEED = 404
NEVER_FIRST = {"ttft_ms": 30_000, "tps": 20, "tokens": 400, "seed": NEVER_FIRST_SEED}
# a disconnect must be seen within one token interval; allow wide scheduling margins
MARGIN_S = 0.5

Opener = Callable[[openai.OpenAI, anthropic.Anthropic, dict[str, str]], AbstractContextManager[Any]]


def open_chat(o: openai.OpenAI, a: anthropic.Anthropic, headers: dict[str, str]) -> Any:
    return o.chat.completions.create(
        model="mock-gpt", messages=USER, stream=True, extra_headers=headers
    )


def open_responses(o: openai.OpenAI, a: anthropic.Anthropic, headers: dict[str, str]) -> Any:
    return o.responses.create(model="mock-gpt", input="hi", stream=True, extra_headers=headers)


def open_messages(o: openai.OpenAI, a: anthropic.Anthropic, headers: dict[str, str]) -> Any:
    return a.messages.stream(
        model="mock-claude", max_tokens=1000, messages=USER, extra_headers=headers
    )


OPENERS = pytest.mark.parametrize(
    "opener", [open_chat, open_responses, open_messages], ids=["chat", "responses", "messages"]
)


def assert_cancelled_cleanly(server: LiveServer, closed_at: float) -> dict[str, Any]:
    record = server.wait_until_idle()[-1]
    assert record["state"] == "cancelled"
    assert record["disconnected_at"] is not None
    assert record["disconnected_at"] - closed_at < MARGIN_S
    assert record["tokens_after_disconnect"] <= 1
    assert record["tokens_generated"] < 40
    assert server.metric("mock_requests_running") == 0
    assert server.metric("mock_requests_cancelled_total") == 1
    assert server.metric("mock_requests_completed_total") == 0
    return record


@OPENERS
def test_closing_mid_stream_cancels_the_generation(
    server: LiveServer,
    openai_client: openai.OpenAI,
    anthropic_client: anthropic.Anthropic,
    opener: Opener,
) -> None:
    with opener(openai_client, anthropic_client, scenario_header(**SLOW)) as stream:
        for number, _ in enumerate(stream):
            if number == 5:
                break
        closed_at = time.time()
    record = assert_cancelled_cleanly(server, closed_at)
    assert record["tokens_generated"] >= 1
    assert record["first_token_at"] is not None


@OPENERS
def test_closing_before_the_first_token_cancels_the_generation(
    server: LiveServer,
    openai_client: openai.OpenAI,
    anthropic_client: anthropic.Anthropic,
    opener: Opener,
) -> None:
    started = time.time()
    with opener(openai_client, anthropic_client, scenario_header(**NEVER_FIRST)):
        assert server.records()[-1]["state"] == "running"
        closed_at = time.time()
    record = assert_cancelled_cleanly(server, closed_at)
    assert record["tokens_generated"] == 0
    assert record["first_token_at"] is None
    assert record["disconnected_at"] - started < 5.0  # nowhere near the 30 s TTFT


def test_metrics_count_tokens_generated_after_a_cancel(
    server: LiveServer, openai_client: openai.OpenAI
) -> None:
    with openai_client.chat.completions.create(
        model="mock-gpt", messages=USER, stream=True, extra_headers=scenario_header(**SLOW)
    ) as stream:
        for number, _ in enumerate(stream):
            if number == 3:
                break
    record = server.wait_until_idle()[-1]
    assert server.metric("mock_tokens_generated_total") == record["tokens_generated"]
    assert server.metric("mock_tokens_after_disconnect_total") == record["tokens_after_disconnect"]
    assert server.metric("mock_ttft_seconds_count") == 1


def unary_body(route: str, scenario: dict[str, object]) -> dict[str, object]:
    if route == "/v1/responses":
        return {"model": "mock-gpt", "input": "hi", "mock": scenario}
    return {"model": "mock-gpt", "max_tokens": 1000, "messages": USER, "mock": scenario}


@UNARY_ROUTES
def test_a_unary_answer_whose_client_hangs_up_is_cancelled_at_once(
    server: LiveServer, route: str
) -> None:
    """Bug: a unary answer was waited out in the route function, where Starlette does not watch
    the client: one that hung up after 0.5 s left its 20 s answer ``running`` to the end. Fix:
    the route collects the answer beside a watcher of ``receive()``; the disconnect cancels it."""
    client = raw_request(server.url, route, unary_body(route, SLOW))
    time.sleep(0.5)
    client.close()
    closed_at = time.time()
    record = server.wait_until_idle()[-1]
    assert record["state"] == "cancelled"
    assert record["disconnected_at"] - closed_at < UNARY_MARGIN_S
    assert record["tokens_after_disconnect"] == 0
    assert 1 <= record["tokens_generated"] < 40  # about 9: 0.5 s at 20 tokens/s
    assert record["completion_tokens"] == record["tokens_generated"]
    assert server.metric("mock_requests_running") == 0
    assert server.metric("mock_requests_cancelled_total") == 1
    time.sleep(0.2)
    assert server.records()[-1] == record  # nothing generated since


def test_a_unary_answer_whose_client_hangs_up_before_the_first_token_generates_nothing(
    server: LiveServer,
) -> None:
    client = raw_request(server.url, "/v1/chat/completions", unary_body("", NEVER_FIRST))
    server.wait_for(NEVER_FIRST_SEED, lambda r: r["state"] == "running")
    client.close()
    closed_at = time.time()
    record = server.wait_until_idle()[-1]
    assert record["state"] == "cancelled"
    assert record["disconnected_at"] - closed_at < UNARY_MARGIN_S
    assert (record["tokens_generated"], record["first_token_at"]) == (0, None)


def test_an_sdk_that_times_out_on_a_unary_answer_cancels_it(
    server: LiveServer, openai_client: openai.OpenAI
) -> None:
    with pytest.raises(openai.APITimeoutError):
        openai_client.chat.completions.create(
            model="mock-gpt", messages=USER, extra_headers=scenario_header(**SLOW), timeout=0.5
        )
    closed_at = time.time()
    record = server.wait_until_idle()[-1]
    assert record["state"] == "cancelled"
    assert record["disconnected_at"] - closed_at < UNARY_MARGIN_S
    assert record["tokens_after_disconnect"] == 0
