"""Anthropic Messages: ``POST /v1/messages``, streamed and unary.

Stream grammar (every frame has an ``event:`` line; the SDK drops frames without one)::

    message_start, ping
    per part:  content_block_start (thinking | text | tool_use),
               content_block_delta (thinking_delta | text_delta | input_json_delta) ...,
               [a thinking block only: content_block_delta (signature_delta)]
               content_block_stop
    message_delta (stop_reason end_turn | max_tokens | tool_use | refusal, usage)
    message_stop

An injected error is ``event: error`` with ``overloaded_error``, and the stream ends.

With ``thinking_tokens`` the answer opens with an extended-thinking block: its text arrives as
``thinking_delta`` fragments and, last, one ``signature_delta`` (a made-up signature over the
thinking text; it carries no tokens). Thinking tokens count as output tokens, as Anthropic
bills them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Final

from mock_upstream.bodies import (
    content_text,
    messages_text,
    optional_int,
    optional_list,
    optional_str,
    required_list,
)
from mock_upstream.errors import Flavour, bad_request, in_stream_error
from mock_upstream.events import (
    Delta,
    Dropped,
    Ended,
    Event,
    Failed,
    Finished,
    Malformed,
    Opened,
    PartStarted,
    PartStopped,
    Usage,
)
from mock_upstream.exchange import Parsed
from mock_upstream.plan import FinishReason, Part, Plan, Prompt, ToolSpec
from mock_upstream.scenario import Scenario
from mock_upstream.sse import frame
from mock_upstream.stream import Outcome

NAME: Final = "messages"
ID_PREFIX: Final = "msg_"
CALL_ID_PREFIX: Final = "toolu_"
DEFAULT_MODEL: Final = "mock-claude"
STOP_REASONS: Final[dict[FinishReason, str]] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "refusal": "refusal",
}


def _system_text(body: dict[str, Any]) -> str:
    return content_text(body.get("system"), "system")


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    tools = []
    for number, tool in enumerate(optional_list(body, "tools")):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise bad_request(
                f'tools.{number}.name: Field required (expected {{"name": ..., '
                f'"input_schema": {{...}}}}).',
                f"tools.{number}.name",
            )
        schema = tool.get("input_schema")
        tools.append(ToolSpec(tool["name"], schema if isinstance(schema, dict) else {}))
    return tuple(tools)


def _tool_choice(body: dict[str, Any]) -> tuple[str | None, bool]:
    """Map Anthropic's tool_choice to (choice, parallel)."""
    choice = body.get("tool_choice")
    if choice is None:
        return None, True
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise bad_request(
            'tool_choice: expected {"type": "auto" | "any" | "tool" | "none"}.',
            "tool_choice",
        )
    parallel = not choice.get("disable_parallel_tool_use", False)
    kind = choice["type"]
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice.name: Field required.", "tool_choice.name")
        return str(choice["name"]), parallel
    return {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def parse(body: dict[str, Any]) -> Parsed:
    """Read a messages request."""
    messages = required_list(body, "messages")
    system = _system_text(body)
    text = messages_text(messages)
    choice, parallel = _tool_choice(body)
    prompt = Prompt(
        text=f"{system}\n{text}" if system else text,
        model=optional_str(body, "model", DEFAULT_MODEL),
        max_tokens=optional_int(body, "max_tokens", 1),
        tools=_tools(body),
        tool_choice=choice,
        parallel_tool_calls=parallel,
    )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("stream: Input should be a valid boolean.", "stream")
    return Parsed(prompt=prompt, stream=stream, include_usage=False)


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def signature(thinking: str) -> str:
    """The mock's stand-in for a thinking block's signature: made from its text, so stable."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest() * 2).decode()


def _block(part: Part, text: str) -> dict[str, Any]:
    if part.kind == "text":
        return {"type": "text", "text": text}
    if part.kind == "thinking":
        return {"type": "thinking", "thinking": text, "signature": signature(text)}
    try:
        arguments = json.loads(text) if text else {}
    except json.JSONDecodeError:  # cut short by max_tokens
        arguments = {}
    return {"type": "tool_use", "id": part.call_id, "name": part.name, "input": arguments}


class MessagesWire:
    """Anthropic message events for one answer."""

    flavour: Flavour = "anthropic"

    def __init__(self, response_id: str, plan: Plan, parsed: Parsed, scenario: Scenario) -> None:
        self.id = response_id
        self.plan = plan
        self.open_block: int | None = None
        self.thinking: dict[int, str] = {}  # thinking text so far, by block index

    def _message(
        self, content: list[dict[str, Any]], stop: str | None, usage: Usage
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.plan.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": _usage(usage),
        }

    def _stop_open_block(self) -> str:
        if self.open_block is None:
            return ""
        index, self.open_block = self.open_block, None
        frames = ""
        if index in self.thinking:
            delta = {"type": "signature_delta", "signature": signature(self.thinking[index])}
            frames = frame(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
        stop = frame({"type": "content_block_stop", "index": index}, "content_block_stop")
        return frames + stop

    def encode(self, event: Event) -> str:
        if isinstance(event, Opened):
            start = self._message([], None, Usage(self.plan.prompt_tokens, 1))
            return frame({"type": "message_start", "message": start}, "message_start") + frame(
                {"type": "ping"}, "ping"
            )
        if isinstance(event, PartStarted):
            self.open_block = event.index
            block = _block(event.part, "")
            if block["type"] == "tool_use":
                block["input"] = {}
            if block["type"] == "thinking":
                block["signature"] = ""
                self.thinking[event.index] = ""
            return frame(
                {"type": "content_block_start", "index": event.index, "content_block": block},
                "content_block_start",
            )
        if isinstance(event, Delta):
            if event.part.kind == "text":
                delta = {"type": "text_delta", "text": event.text}
            elif event.part.kind == "thinking":
                self.thinking[event.index] += event.text
                delta = {"type": "thinking_delta", "thinking": event.text}
            else:
                delta = {"type": "input_json_delta", "partial_json": event.text}
            return frame(
                {"type": "content_block_delta", "index": event.index, "delta": delta},
                "content_block_delta",
            )
        if isinstance(event, PartStopped):
            return self._stop_open_block()
        if isinstance(event, Finished):
            message_delta: dict[str, Any] = {
                "type": "message_delta",
                "delta": {"stop_reason": STOP_REASONS[event.reason], "stop_sequence": None},
                "usage": _usage(event.usage),
            }
            return (
                self._stop_open_block()
                + frame(message_delta, "message_delta")
                + frame({"type": "message_stop"}, "message_stop")
            )
        if isinstance(event, Failed):
            return frame(in_stream_error("anthropic", event.usage.completion_tokens), "error")
        if isinstance(event, Malformed):
            return 'event: content_block_delta\ndata: {"type":"content_block_delta","ind\n\n'
        assert isinstance(event, Dropped | Ended)
        return ""

    def body(self, outcome: Outcome) -> dict[str, Any]:
        content = [_block(part, text) for part, text in outcome.parts]
        return self._message(content, STOP_REASONS[outcome.finish], outcome.usage)
