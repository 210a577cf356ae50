"""One stream per API pinned byte for byte (ids and times normalised).

To accept an intended wire change, run with ``MOCK_UPSTREAM_UPDATE_GOLDEN=1`` and review
the diff of ``tests/mock_upstream/golden/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from mock_support import USER, LiveServer

pytestmark = pytest.mark.sockets

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MOCK_UPSTREAM_UPDATE_GOLDEN") == "1"
SCENARIO = {"X-Mock-Scenario": "ttft_ms=0;tps=10000;tokens=12"}
ID = re.compile(r"\b(chatcmpl-|resp_|msg_|fc_|call_|toolu_)[A-Za-z0-9]{24}\b")
TIME = re.compile(r'"(created|created_at)":\d+')

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat_completions.sse": (
        "/v1/chat/completions",
        {
            "model": "mock-gpt",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "chat_completions_tools.sse": (
        "/v1/chat/completions",
        {"model": "mock-gpt", "messages": USER, "stream": True, "tools": [WEATHER_TOOL]},
    ),
    # The wire variants (docs/CONTRACT.md): the same answers, framed as other servers frame them.
    "chat_completions_comments.sse": (
        "/v1/chat/completions",
        {
            "model": "mock-gpt",
            "messages": USER,
            "stream": True,
            "mock": {"ttft_ms": 120, "comment_every_ms": 50},
        },
    ),
    "chat_completions_usage_with_choices.sse": (
        "/v1/chat/completions",
        {
            "model": "mock-gpt",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
            "mock": {"usage_with_choices": True},
        },
    ),
    "chat_completions_tools_interleaved.sse": (
        "/v1/chat/completions",
        {
            "model": "mock-gpt",
            "messages": USER,
            "stream": True,
            "tools": [WEATHER_TOOL, TIME_TOOL],
            "mock": {"interleave_tools": True},
        },
    ),
    "chat_completions_error_first.sse": (
        "/v1/chat/completions",
        {
            "model": "mock-gpt",
            "messages": USER,
            "stream": True,
            "mock": {"error_after": 0, "done_after_error": True},
        },
    ),
    # The answer-shape keys: a filler opening, thinking before text, a refusal in deltas.
    "chat_completions_filler.sse": (
        "/v1/chat/completions",
        {"model": "mock-gpt", "messages": USER, "stream": True, "mock": {"filler_tokens": 5}},
    ),
    "messages_thinking.sse": (
        "/v1/messages",
        {
            "model": "mock-claude",
            "max_tokens": 100,
            "messages": USER,
            "stream": True,
            "mock": {"thinking_tokens": 6},
        },
    ),
    "responses_refusal_deltas.sse": (
        "/v1/responses",
        {
            "model": "mock-gpt",
            "input": "Tell me about streaming.",
            "stream": True,
            "mock": {"refusal_after": 4, "refusal_deltas": True},
        },
    ),
    "responses.sse": (
        "/v1/responses",
        {"model": "mock-gpt", "input": "Tell me about streaming.", "stream": True},
    ),
    "messages.sse": (
        "/v1/messages",
        {"model": "mock-claude", "max_tokens": 100, "messages": USER, "stream": True},
    ),
}


def normalise(text: str) -> str:
    seen: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"{match.group(1)}<id{len(seen)}>")

    return TIME.sub(r'"\1":0', ID.sub(name, text))


@pytest.mark.parametrize("filename", sorted(CASES))
def test_stream_matches_the_golden_file(server: LiveServer, filename: str) -> None:
    route, body = CASES[filename]
    response = server.client.post(route, json=body, headers=SCENARIO)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    got = normalise(response.content.decode())
    path = GOLDEN / filename
    if UPDATE or not path.exists():
        path.write_text(got, encoding="utf-8", newline="")
        if not UPDATE:
            pytest.fail(f"wrote missing golden file {path}; check it and run again")
    assert got == path.read_text(encoding="utf-8")
