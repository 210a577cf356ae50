"""One Anthropic turn with thinking, a text preamble and two tool calls, from the real mock over a
real socket: accumulated by (index, delta type) it equals the anthropic SDK's final message,
in any order of the blocks' deltas; one flat buffer is neither text nor JSON."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from labkit import capture_stream
from labkit.servers import ServerHandle
from solutions.accumulate import accumulate_blocks, blocks, flat

pytestmark = pytest.mark.sockets

TOOLS = [
    {
        "name": "line_test",
        "input_schema": {"type": "object", "properties": {"line": {"type": "string"}}},
    },
    {
        "name": "uptime",
        "input_schema": {"type": "object", "properties": {"days": {"type": "integer"}}},
    },
]
SCENARIO = {"ttft_ms": 20, "tps": 400, "thinking_tokens": 14, "preamble_tokens": 9, "seed": 4}


def request() -> dict[str, Any]:
    return {
        "model": "mock-claude",
        "max_tokens": 500,
        "messages": [{"role": "user", "content": "Is my line up?"}],
        "tools": TOOLS,
        "stream": True,
        "mock": SCENARIO,
    }


def turn(mock: ServerHandle) -> list[dict[str, Any]]:
    capture = capture_stream(mock.url + "/v1/messages", json=request())
    return [e.json() for e in capture.events]


def round_robin(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same events with the blocks' deltas taking turns (each block's own order kept)."""
    starts = [e for e in events if e["type"] == "content_block_start"]
    queues: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        if e["type"] == "content_block_delta":
            queues.setdefault(e["index"], []).append(e)
    mixed: list[dict[str, Any]] = []
    while any(queues.values()):
        for queue in queues.values():
            if queue:
                mixed.append(queue.pop(0))
    return starts + mixed


def test_the_buffers_are_keyed_by_index_and_delta_type(mock: ServerHandle) -> None:
    _, buffers = accumulate_blocks(turn(mock))
    assert sorted(buffers) == [
        (0, "signature_delta"),
        (0, "thinking_delta"),
        (1, "text_delta"),
        (2, "input_json_delta"),
        (3, "input_json_delta"),
    ]


def test_accumulated_blocks_equal_the_sdks_final_message_in_any_order(mock: ServerHandle) -> None:
    body = request()
    with anthropic.Anthropic(base_url=mock.url, api_key="lab-key", max_retries=0) as client:
        with client.messages.stream(
            model=body["model"],
            max_tokens=body["max_tokens"],
            messages=body["messages"],
            tools=body["tools"],
            extra_body={"mock": SCENARIO},
        ) as stream:
            raw = [
                e.model_dump(exclude_none=True)
                for e in stream
                if e.type in ("content_block_start", "content_block_delta")
            ]
            final = stream.get_final_message()
    expected = [b.model_dump(exclude_none=True) for b in final.content]
    for block in expected:
        block.pop("citations", None)
        block.pop("caller", None)
        block.pop("id", None)  # the start event's, new on every request: blocks() leaves it
    events = [{**e, "content_block": e.get("content_block") or {}} for e in raw]
    assert blocks(*accumulate_blocks(events)) == expected
    assert blocks(*accumulate_blocks(round_robin(events))) == expected
    assert [b["type"] for b in expected] == ["thinking", "text", "tool_use", "tool_use"]


def test_one_flat_buffer_is_neither_the_text_nor_any_tool_input(mock: ServerHandle) -> None:
    events = turn(mock)
    glued = flat(events)
    text = blocks(*accumulate_blocks(events))[1]["text"]
    assert text in glued and glued != text
    try:
        json.loads(glued)
    except ValueError:
        parsed = False
    else:
        parsed = True
    assert not parsed
