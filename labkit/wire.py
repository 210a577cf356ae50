"""What one streamed event means, in each provider's wire format.

``interpret_event`` reads one SSE event from OpenAI Chat Completions, OpenAI Responses or
Anthropic Messages and says whether it carried content (a token), what text it added, any usage
it reported, and whether it ended the stream. ``interpret_body`` does the same for a whole
non-streamed JSON response. The three formats are told apart by their own fields, so one capture
works against any of the mock's APIs and against a proxy in front of them.

Content-carrying events (the ones TTFT and token times count):

- Chat Completions: a chunk whose ``delta`` has non-empty ``content``, ``refusal`` or tool-call
  ``arguments``. The first chunk (role only, empty content) is not one.
- Anthropic: ``content_block_delta`` (text, tool-input JSON or thinking).
- Responses: ``response.output_text.delta``, ``response.refusal.delta``,
  ``response.function_call_arguments.delta``.
- The lab's stream gateway (notebook 12): ``gateway.delta`` (released text) and
  ``gateway.tool_call`` (a validated call); ``gateway.completed`` and ``gateway.interrupted``
  end its stream, ``gateway.start`` opens it.

A content event is *useful* when it carries something a reader can use: text with a letter or
a digit in it, tool-call arguments, or a refusal. Blank lines, spaces and ellipses are content
(they count for TTFT) but not useful, and neither is Anthropic's thinking (not shown to the
reader) or its signature. First useful content is the time of the first useful event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Meaning", "Terminal", "interpret_body", "interpret_event", "says_something"]

Terminal = Literal[
    "done",
    "completed",
    "interrupted",
    "message_stop",
    "response.completed",
    "response.incomplete",
    "error",
    "truncated",
    "disconnected",
]

_RESPONSES_TOKEN_TYPES = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
    }
)


@dataclass(frozen=True)
class Meaning:
    """What one event contributes to a capture."""

    token: bool = False
    text: str = ""
    usage: dict[str, Any] | None = None
    terminal: Terminal | None = None
    error: Any = None
    malformed: bool = False
    useful: bool = False


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def says_something(text: str) -> bool:
    """Whether ``text`` holds a letter or a digit (filler such as "\\n..." does not)."""
    return any(c.isalnum() for c in text)


def interpret_event(event: str, data: str) -> Meaning:
    """Interpret one SSE event (its ``event:`` name and its ``data``)."""
    if data.strip() == "[DONE]":
        return Meaning(terminal="done")
    try:
        obj = json.loads(data)
    except ValueError:
        return Meaning(malformed=True)
    if not isinstance(obj, dict):
        return Meaning(malformed=True)
    kind = obj.get("type") if isinstance(obj.get("type"), str) else event

    if kind == "error" or (event == "error") or ("error" in obj and "choices" not in obj):
        error = obj.get("error", obj)
        return Meaning(terminal="error", error=error if error is not None else obj)
    if "choices" in obj:
        return _chat_chunk(obj)
    if kind == "message_start":
        return Meaning(usage=_dict(_dict(obj.get("message")).get("usage")) or None)
    if kind == "content_block_delta":
        delta = _dict(obj.get("delta"))
        text = str(delta.get("text", ""))
        useful = says_something(text) or delta.get("type") == "input_json_delta"
        return Meaning(token=True, text=text, useful=useful)
    if kind == "message_delta":
        return Meaning(usage=_dict(obj.get("usage")) or None)
    if kind == "message_stop":
        return Meaning(terminal="message_stop")
    if kind in _RESPONSES_TOKEN_TYPES:
        if kind != "response.output_text.delta":  # a refusal or function-call arguments
            return Meaning(token=True, useful=True)
        text = str(obj.get("delta", ""))
        return Meaning(token=True, text=text, useful=says_something(text))
    if kind in ("response.completed", "response.incomplete"):
        usage = _dict(_dict(obj.get("response")).get("usage")) or None
        terminal: Terminal = (
            "response.completed" if kind == "response.completed" else ("response.incomplete")
        )
        return Meaning(usage=usage, terminal=terminal)
    if kind == "response.failed":
        return Meaning(terminal="error", error=_dict(obj.get("response")).get("error"))
    if kind == "gateway.delta":
        text = str(obj.get("text", ""))
        return Meaning(token=True, text=text, useful=says_something(text))
    if kind == "gateway.tool_call":
        return Meaning(token=True, useful=True)
    if kind == "gateway.completed":
        return Meaning(usage=_dict(obj.get("usage")) or None, terminal="completed")
    if kind == "gateway.interrupted":
        return Meaning(terminal="interrupted", error=obj)
    return Meaning()


def _chat_chunk(obj: dict[str, Any]) -> Meaning:
    text = ""
    token = useful = False
    for choice in obj.get("choices") or []:
        delta = _dict(_dict(choice).get("delta"))
        content = delta.get("content")
        if isinstance(content, str) and content:
            text += content
            token = True
        if delta.get("refusal"):
            token = useful = True
        for call in delta.get("tool_calls") or []:
            if _dict(_dict(call).get("function")).get("arguments"):
                token = useful = True
    usage = obj.get("usage")
    return Meaning(
        token=token,
        text=text,
        usage=usage if isinstance(usage, dict) else None,
        useful=useful or says_something(text),
    )


def interpret_body(body: Any) -> Meaning:
    """Interpret a whole (non-streamed) JSON response body."""
    obj = _dict(body)
    if "error" in obj:
        return Meaning(terminal="error", error=obj["error"])
    usage = _dict(obj.get("usage")) or None
    text = ""
    if "choices" in obj:
        for choice in obj["choices"] or []:
            content = _dict(_dict(choice).get("message")).get("content")
            text += content if isinstance(content, str) else ""
    elif obj.get("type") == "message":
        for block in obj.get("content") or []:
            text += str(_dict(block).get("text", ""))
    elif obj.get("object") == "response":
        for item in obj.get("output") or []:
            for part in _dict(item).get("content") or []:
                text += str(_dict(part).get("text", ""))
    return Meaning(text=text, usage=usage)
