"""An OpenAI chat request said in Anthropic's Messages API, and a Messages stream read back.

Notebook 08 turns Anthropic's stream into OpenAI chunks (the learner's ``to_openai``); these are
the two given ends around it. ``anthropic_request`` translates what the two APIs say
differently about a conversation, so that nothing the client sent is dropped on the way:

- ``system`` messages are no message in Anthropic's API but its top-level ``system`` field
  (their texts joined by a blank line, in order);
- an assistant message's ``tool_calls`` become ``tool_use`` blocks (its ``arguments``, a JSON
  string, become the block's ``input`` object), after the message's text if it has any;
- ``tool`` messages (a tool's result) become ``tool_result`` blocks in a ``user`` message, those
  that follow one another in one message, as Anthropic wants the results of parallel calls;
- ``tools`` become ``tools`` with ``input_schema``; ``max_tokens``, which Anthropic requires,
  defaults to 1,024; the mock's own ``mock`` field passes through.

``anthropic_events`` reads the frames with :class:`labkit.sse.SSEDecoder`: lines end only at
CRLF, LF or CR, as SSE says (httpx's ``aiter_lines`` also ends one at U+2028, which a model's
text may hold raw), and a data value loses one leading space, no more.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from labkit.sse import SSEDecoder, SSEEvent

if TYPE_CHECKING:
    import httpx

__all__ = ["anthropic_events", "anthropic_request"]

DEFAULT_MAX_TOKENS = 1024


def _text(content: Any) -> str:
    """The text of an OpenAI message's ``content``: a string, or the ``text`` of its parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls") or []
    if not calls:
        return {"role": "assistant", "content": _text(message.get("content"))}
    blocks: list[dict[str, Any]] = []
    if text := _text(message.get("content")):
        blocks.append({"type": "text", "text": text})
    for call in calls:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": json.loads(function.get("arguments") or "{}"),
            }
        )
    return {"role": "assistant", "content": blocks}


def _results_only(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a user turn made of tool results (so far)."""
    content = message["content"]
    return (
        message["role"] == "user"
        and isinstance(content, list)
        and all(block.get("type") == "tool_result" for block in content)
    )


def anthropic_request(body: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI chat request ``body``, said in Anthropic's words, streamed."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for message in body["messages"]:
        role = message["role"]
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": _text(message.get("content")),
            }
            if messages and _results_only(messages[-1]):
                messages[-1]["content"].append(result)  # parallel calls' results: one user turn
            else:
                messages.append({"role": "user", "content": [result]})
        elif role == "assistant":
            messages.append(_assistant(message))
        else:
            messages.append({"role": role, "content": message.get("content") or ""})
    request: dict[str, Any] = {
        "model": body.get("model", "lab-claude"),
        "max_tokens": body.get("max_tokens") or DEFAULT_MAX_TOKENS,
        "messages": messages,
        "stream": True,
    }
    if system:
        request["system"] = "\n\n".join(system)
    tools = [
        {"name": t["function"]["name"], "input_schema": t["function"].get("parameters", {})}
        for t in body.get("tools", [])
    ]
    if tools:
        request["tools"] = tools
    if "mock" in body:
        request["mock"] = body["mock"]
    return request


async def anthropic_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event name, data object) for each SSE event of an Anthropic stream, as it arrives."""
    decoder = SSEDecoder()
    async for chunk in response.aiter_bytes():
        for item in decoder.decode(chunk):
            if isinstance(item, SSEEvent):
                yield item.event, json.loads(item.data)
