"""OpenAI Chat Completions: ``POST /v1/chat/completions``, streamed and unary.

Stream grammar (one ``data:`` line per chunk, no ``event:`` lines)::

    data: {"object": "chat.completion.chunk", "choices": [{"delta": {"role": "assistant", ...}}]}
    data: {... "delta": {"content": " token"} ...}                  (text)
    data: {... "delta": {"tool_calls": [{"index": 0, "id": ..., "type": "function",
                                          "function": {"name": ..., "arguments": ""}}]}}
    data: {... "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\\""}}]}}
    data: {... "delta": {}, "finish_reason": "stop"}                 (stop/length/tool_calls/
                                                                      content_filter)
    data: {... "choices": [], "usage": {...}}                        (include_usage only)
    data: [DONE]

An injected error is ``data: {"error": {...}}`` and the stream ends without ``[DONE]``
(with ``done_after_error``, ``data: [DONE]`` follows it, as vLLM sends it). With
``usage_with_choices`` the usage rides on the ``finish_reason`` chunk, whose ``choices`` is not
empty, and there is no ``choices: []`` chunk; with ``interleave_tools`` the argument fragments
of parallel tool calls take turns, each delta naming its call by ``index``.
"""

from __future__ import annotations

import time
from typing import Any, Final

from mock_upstream.bodies import (
    messages_text,
    optional_bool,
    optional_int,
    optional_list,
    optional_object,
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
from mock_upstream.plan import FinishReason, Plan, Prompt, ToolSpec
from mock_upstream.scenario import Scenario
from mock_upstream.sse import frame
from mock_upstream.stream import Outcome

NAME: Final = "chat"
ID_PREFIX: Final = "chatcmpl-"
CALL_ID_PREFIX: Final = "call_"
DEFAULT_MODEL: Final = "mock-gpt"
FINISH_REASONS: Final[dict[FinishReason, str]] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "refusal": "content_filter",
}


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    tools = []
    for number, tool in enumerate(optional_list(body, "tools")):
        where = f"tools[{number}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(
                f'\'{where}\' must be {{"type": "function", "function": {{"name": ...}}}}.',
                f"{where}.function.name",
            )
        parameters = function.get("parameters")
        tools.append(ToolSpec(function["name"], parameters if isinstance(parameters, dict) else {}))
    return tuple(tools)


def _tool_choice(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    raise bad_request(
        '\'tool_choice\' must be "auto", "none", "required" or '
        '{"type": "function", "function": {"name": ...}}.',
        "tool_choice",
    )


def parse(body: dict[str, Any]) -> Parsed:
    """Read a chat completions request."""
    messages = required_list(body, "messages")
    max_tokens = optional_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = optional_int(body, "max_tokens", 1)
    prompt = Prompt(
        text=messages_text(messages),
        model=optional_str(body, "model", DEFAULT_MODEL),
        seed=optional_int(body, "seed"),
        max_tokens=max_tokens,
        tools=_tools(body),
        tool_choice=_tool_choice(body),
        parallel_tool_calls=optional_bool(body, "parallel_tool_calls", True),
    )
    stream = optional_bool(body, "stream")
    include_usage = optional_bool(optional_object(body, "stream_options"), "include_usage")
    return Parsed(prompt=prompt, stream=stream, include_usage=stream and include_usage)


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


class ChatWire:
    """Chat completion chunks for one answer."""

    flavour: Flavour = "openai"

    def __init__(self, response_id: str, plan: Plan, parsed: Parsed, scenario: Scenario) -> None:
        self.id = response_id
        self.plan = plan
        self.include_usage = parsed.include_usage
        self.usage_with_choices = scenario.usage_with_choices
        self.done_after_error = scenario.done_after_error
        self.created = int(time.time())

    def _chunk(
        self, delta: dict[str, Any], finish: str | None = None, usage: Usage | None = None
    ) -> str:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.plan.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.include_usage:
            chunk["usage"] = None if usage is None else _usage(usage)
        return frame(chunk)

    def encode(self, event: Event) -> str:
        if isinstance(event, Opened):
            text = bool(self.plan.parts) and self.plan.parts[0].kind == "text"
            return self._chunk({"role": "assistant", "content": "" if text else None})
        if isinstance(event, PartStarted) and event.part.kind == "tool_call":
            call = {
                "index": event.part.tool_index,
                "id": event.part.call_id,
                "type": "function",
                "function": {"name": event.part.name, "arguments": ""},
            }
            return self._chunk({"tool_calls": [call]})
        if isinstance(event, Delta):
            if event.part.kind == "text":
                return self._chunk({"content": event.text})
            fragment = {"index": event.part.tool_index, "function": {"arguments": event.text}}
            return self._chunk({"tool_calls": [fragment]})
        if isinstance(event, Finished):
            if self.include_usage and self.usage_with_choices:
                return self._chunk({}, FINISH_REASONS[event.reason], event.usage) + frame("[DONE]")
            frames = self._chunk({}, FINISH_REASONS[event.reason])
            if self.include_usage:
                frames += frame(
                    {
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.plan.model,
                        "system_fingerprint": None,
                        "choices": [],
                        "usage": _usage(event.usage),
                    }
                )
            return frames + frame("[DONE]")
        if isinstance(event, Failed):
            error = frame(in_stream_error("openai", event.usage.completion_tokens))
            return error + frame("[DONE]") if self.done_after_error else error
        if isinstance(event, Malformed):
            return f'data: {{"id":"{self.id}","object":"chat.completion.chunk","choices":[{{"de\n\n'
        assert isinstance(event, PartStarted | PartStopped | Dropped | Ended)
        return ""

    def body(self, outcome: Outcome) -> dict[str, Any]:
        text = "".join(t for p, t in outcome.parts if p.kind == "text")
        calls = [
            {
                "id": part.call_id,
                "type": "function",
                "function": {"name": part.name, "arguments": arguments},
            }
            for part, arguments in outcome.parts
            if part.kind == "tool_call"
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text or None if calls else text,
            "refusal": None,
        }
        if calls:
            message["tool_calls"] = calls
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.plan.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": FINISH_REASONS[outcome.finish],
                }
            ],
            "usage": _usage(outcome.usage),
        }
