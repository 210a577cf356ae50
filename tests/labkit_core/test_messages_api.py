"""``labkit.messages_api``: an OpenAI conversation keeps everything it says in Anthropic's words
(notebook 08's given request translation), and a Messages stream is read as SSE frames it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from labkit.messages_api import anthropic_events, anthropic_request

CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"c": 1}'}},
    {"id": "call_2", "type": "function", "function": {"name": "time", "arguments": ""}},
]
CONVERSATION: dict[str, Any] = {
    "model": "lab-claude",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather and time in Oslo?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
        {"role": "system", "content": "Answer in English."},
        {"role": "user", "content": "Thanks."},
    ],
    "tools": [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ],
    "mock": {"seed": 3},
}


def test_system_messages_become_the_system_field_in_order() -> None:
    request = anthropic_request(CONVERSATION)
    assert request["system"] == "Be brief.\n\nAnswer in English."
    assert all(m["role"] in ("user", "assistant") for m in request["messages"])


def test_tool_calls_become_tool_use_blocks_after_the_text() -> None:
    assistant = anthropic_request(CONVERSATION)["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"c": 1}},
            {"type": "tool_use", "id": "call_2", "name": "time", "input": {}},
        ],
    }


def test_the_results_of_parallel_calls_are_one_user_turn_of_tool_results() -> None:
    messages = anthropic_request(CONVERSATION)["messages"]
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "rain"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "noon"},
        ],
    }
    assert messages[3] == {"role": "user", "content": "Thanks."}  # a user's text stays its own


def test_tools_max_tokens_and_the_mock_field_carry_over() -> None:
    request = anthropic_request(CONVERSATION)
    assert request["tools"] == [{"name": "weather", "input_schema": {"type": "object"}}]
    assert request["max_tokens"] == 1024 and request["stream"] is True
    assert request["mock"] == {"seed": 3}
    plain = anthropic_request({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9})
    assert "system" not in plain and "tools" not in plain and plain["max_tokens"] == 9


def test_a_stream_is_read_as_sse_frames_whatever_its_chunks() -> None:
    raw = (
        'event: content_block_delta\ndata: {"t": "a\u2028b"}\r\n\r\n'
        "event: message_stop\ndata:  {}\n\n"
    ).encode()

    async def read() -> list[tuple[str, dict[str, Any]]]:
        chunks = [raw[:7], raw[7:30], raw[30:]]
        response = httpx.Response(200, content=_chunks(chunks))
        return [event async for event in anthropic_events(response)]

    assert asyncio.run(read()) == [
        ("content_block_delta", {"t": "a\u2028b"}),
        ("message_stop", json.loads(" {}")),
    ]


async def _chunks(chunks: list[bytes]) -> Any:
    for chunk in chunks:
        yield chunk
