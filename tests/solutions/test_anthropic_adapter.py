"""Anthropic events normalised into chat chunks: cached prompt tokens billed in OpenAI's shape,
every stop reason mapped (an unknown one passed on, never a silent ``stop``), and notebook 08's
build-it the same code as ``solutions/anthropic_adapter.py``.

Bug: ``to_openai`` said ``prompt_tokens = input_tokens``. Anthropic's ``input_tokens`` leaves out
the tokens read from and written to the prompt cache, so a cached prompt was billed as a few
tokens. Fix: ``prompt_tokens`` counts all three, ``prompt_tokens_details.cached_tokens`` the
cache reads, ``prompt_tokens_details.cache_creation_tokens`` the cache writes.

Bug: ``FINISH`` mapped four stop reasons and everything else became ``stop``: a paused turn
or a context window that ran out looked like a finished answer. Fix: every reason of the
``anthropic`` SDK's ``StopReason`` mapped, an unknown one passed on as it came.
"""

from __future__ import annotations

import json
from typing import Any, get_args

import anthropic
import openai
import pytest
from anthropic.types import StopReason
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from openai.types.chat import ChatCompletionChunk

from labkit import capture_stream, serve
from labkit.servers import ServerHandle
from mock_upstream.anthropic_messages import STOP_REASONS
from solutions.anthropic_adapter import FINISH, to_openai


def start(**usage: int) -> dict[str, Any]:
    """A ``message_start`` as Anthropic sends it, with these counts in its usage."""
    counts = {
        "input_tokens": 20,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        **usage,
    }
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": counts,
    }
    return anthropic.types.RawMessageStartEvent.model_validate(
        {"type": "message_start", "message": message}
    ).model_dump(mode="json", exclude_unset=True)


def delta(stop_reason: str | None = "end_turn", **usage: int | None) -> dict[str, Any]:
    """A ``message_delta`` with this stop reason and these (cumulative) counts."""
    event = {
        "type": "message_delta",
        "usage": {"output_tokens": 30, **usage},
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
    }
    if stop_reason in get_args(StopReason):
        anthropic.types.RawMessageDeltaEvent.model_validate(event)  # a real event's shape
    return event


def ending(*events: dict[str, Any]) -> tuple[str | None, ChatCompletionChunk]:
    """The finish_reason and the usage chunk (as the openai SDK reads it) of these events."""
    state: dict[str, Any] = {}
    out = [body for event in events for body in to_openai(event["type"], event, state)]
    finish = [b["choices"][0]["finish_reason"] for b in out if b.get("choices")][-1]
    return finish, ChatCompletionChunk.model_validate(out[-1])


def test_cache_reads_are_prompt_tokens_and_said_as_cached_tokens() -> None:
    _, chunk = ending(start(cache_read_input_tokens=2000), delta())
    usage = chunk.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (2020, 30, 2050)
    assert usage.prompt_tokens_details.cached_tokens == 2000


def test_cache_writes_are_prompt_tokens_kept_apart_from_cached_tokens() -> None:
    _, chunk = ending(start(cache_creation_input_tokens=1500), delta())
    usage = chunk.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens, usage.total_tokens) == (1520, 1550)
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.prompt_tokens_details.model_extra == {"cache_creation_tokens": 1500}


def test_message_deltas_counts_are_the_final_word_and_its_nulls_are_not() -> None:
    """``message_delta``'s counts are cumulative: where it carries one, it wins (as the
    ``anthropic`` SDK accumulates them); a count it leaves out or sends as null keeps
    ``message_start``'s."""
    _, later = ending(start(cache_read_input_tokens=100), delta(cache_read_input_tokens=2000))
    _, nulls = ending(start(cache_read_input_tokens=100), delta(cache_read_input_tokens=None))
    assert later.usage is not None and later.usage.prompt_tokens == 2020
    assert nulls.usage is not None and nulls.usage.prompt_tokens == 120


def test_every_stop_reason_of_the_anthropic_sdk_is_mapped() -> None:
    """A reason the SDK gains fails here until ``FINISH`` says what it becomes."""
    assert set(FINISH) == set(get_args(StopReason))
    assert set(STOP_REASONS.values()) <= set(FINISH)  # what the mock sends


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("pause_turn", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("a_reason_from_next_year", "a_reason_from_next_year"),
    ],
)
def test_a_stop_reason_becomes_its_finish_reason_and_only_a_finished_turn_says_stop(
    reason: str, finish: str
) -> None:
    got, _ = ending(start(), delta(reason))
    assert got == finish


@pytest.mark.sockets
def test_the_mocks_streams_keep_their_counts_and_stop_reasons(mock: ServerHandle) -> None:
    """Over a real socket: each stop reason the mock sends, and its usage (no cache: the mock
    caches nothing), come out as the table says."""
    tools = [{"name": "ping", "input_schema": {"type": "object", "properties": {}}}]
    cases: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "end_turn": ({}, {}),
        "max_tokens": ({"max_tokens": 5}, {}),
        "tool_use": ({"tools": tools}, {}),
        "refusal": ({}, {"refusal_after": 4}),
    }
    for seed, (reason, (fields, scenario)) in enumerate(cases.items()):
        body = {
            "model": "mock-claude",
            "max_tokens": 64,
            "stream": True,
            **fields,
            "messages": [{"role": "user", "content": "Is my line up?"}],
            "mock": {"ttft_ms": 5, "tps": 1000, "tokens": 16, "seed": seed, **scenario},
        }
        sent = capture_stream(mock.url + "/v1/messages", json=body)
        final = next(e.json() for e in sent.events if e.event == "message_delta")
        assert final["delta"]["stop_reason"] == reason
        finish, chunk = ending(*(e.json() for e in sent.events))
        assert finish == FINISH[reason]
        usage = chunk.usage
        assert usage is not None and usage.prompt_tokens_details is not None
        assert usage.prompt_tokens == final["usage"]["input_tokens"]
        assert usage.completion_tokens == final["usage"]["output_tokens"]
        assert usage.prompt_tokens_details.cached_tokens == 0


@pytest.mark.sockets
def test_an_unknown_stop_reason_and_the_cache_counts_reach_the_openai_client() -> None:
    """Over a real socket, read by the openai SDK: it does not check ``finish_reason`` against
    its list while streaming, so the client sees the provider's own word (which no client takes
    for ``stop``), and it keeps ``cache_creation_tokens``, a field its model does not name."""
    events = [start(cache_creation_input_tokens=1500), delta("a_reason_from_next_year")]
    state: dict[str, Any] = {}
    frames = [
        f"data: {json.dumps(body)}\n\n" for e in events for body in to_openai(e["type"], e, state)
    ]
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def answer() -> StreamingResponse:
        return StreamingResponse(
            iter([*frames, "data: [DONE]\n\n"]), media_type="text/event-stream"
        )

    with (
        serve(app, name="adapted-chunks") as server,
        openai.OpenAI(
            base_url=server.url + "/v1", api_key="lab-key", max_retries=0, timeout=5
        ) as client,
    ):
        chunks = list(
            client.chat.completions.create(
                model="claude-x", messages=[{"role": "user", "content": "Hi"}], stream=True
            )
        )
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [
        None,
        "a_reason_from_next_year",
    ]
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens == 1520
    assert getattr(usage.prompt_tokens_details, "cache_creation_tokens") == 1500  # noqa: B009
