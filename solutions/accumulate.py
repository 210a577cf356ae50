"""Text, tool and thinking deltas of one Anthropic turn, accumulated by (index, delta type)
(notebook 09).

One assistant turn may hold a thinking block, a text preamble and tool calls, each a content
block with its own ``index``; their ``content_block_delta`` events carry different payloads:

* ``thinking_delta``: ``.thinking``, the model's reasoning (not for the reader's answer);
* ``signature_delta``: ``.signature``, sent once, last, to close a thinking block;
* ``text_delta``: ``.text``;
* ``input_json_delta``: ``.partial_json``, a fragment of one tool call's JSON input.

A single flat buffer glues them into one string that is neither text nor JSON. Keyed by
``(index, delta type)`` every payload keeps its own buffer, whatever order the blocks'
deltas arrive in, and each buffer becomes part of one block at the end: a tool call's input
is parsed only then, once its ``content_block_stop`` has come.

A block keeps what the deltas accumulate and what a tool call is (its name); a tool call's
``id`` is its ``content_block_start``'s, new on every request, and is left there.

``accumulate_blocks`` and ``blocks`` are notebook 09's build-it, the same code;
``tests/notebooks/test_build_its_match_solutions.py`` keeps them so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

#: Which field of each delta type holds its payload.
PAYLOAD: Final = {
    "thinking_delta": "thinking",
    "signature_delta": "signature",
    "text_delta": "text",
    "input_json_delta": "partial_json",
}

Key = tuple[int, str]
Starts = dict[int, dict[str, Any]]


def accumulate_blocks(events: Iterable[dict[str, Any]]) -> tuple[Starts, dict[Key, str]]:
    """(block starts by index, payload buffers by (index, delta type)) for one turn's events."""
    starts: Starts = {}
    buffers: dict[Key, str] = {}
    for event in events:
        if event["type"] == "content_block_start":
            starts[event["index"]] = event["content_block"]
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            key = (event["index"], delta["type"])
            buffers[key] = buffers.get(key, "") + delta[PAYLOAD[delta["type"]]]
    return starts, buffers


def blocks(starts: Starts, buffers: dict[Key, str]) -> list[dict[str, Any]]:
    """The turn's blocks, as the final message has them (a tool call's input parsed only now)."""
    out = []
    for index in sorted(starts):
        start = starts[index]
        if start["type"] == "thinking":
            out.append({"type": "thinking", "thinking": buffers.get((index, "thinking_delta"), ""),
                        "signature": buffers.get((index, "signature_delta"), "")})  # fmt: skip
        elif start["type"] == "text":
            out.append({"type": "text", "text": buffers.get((index, "text_delta"), "")})
        elif start["type"] == "tool_use":
            arguments = buffers.get((index, "input_json_delta"), "")
            out.append({"type": "tool_use", "name": start["name"],
                        "input": json.loads(arguments or "{}")})  # fmt: skip
    return out


def flat(events: Iterable[dict[str, Any]]) -> str:
    """The wrong way: every delta's payload appended to one string."""
    return "".join(
        e["delta"][PAYLOAD[e["delta"]["type"]]]
        for e in events
        if e.get("type") == "content_block_delta"
    )
