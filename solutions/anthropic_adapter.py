"""Anthropic Messages events normalised into Chat Completions chunks (notebook 08).

``to_openai`` maps one Anthropic stream event onto zero or more chat chunks, so that the
unmodified ``openai`` client reads an Anthropic answer: text and tool-call fragments as deltas,
the stop reason as a ``finish_reason``, errors as a top-level ``error``, and the usage in
OpenAI's shape.

**Usage.** Anthropic counts the prompt in three parts: ``input_tokens`` (not cached),
``cache_read_input_tokens`` (read from the prompt cache, billed at a tenth of the input price)
and ``cache_creation_input_tokens`` (written to it, billed at 1.25 or 2 times). OpenAI's
``prompt_tokens`` is every prompt token, cached or not, with
``prompt_tokens_details.cached_tokens`` saying how many were read from the cache. So:

* ``prompt_tokens`` = input + cache read + cache creation: every prompt token the model read,
  so that ``total_tokens`` counts them all and a bill that knows only ``prompt_tokens`` misses
  none;
* ``prompt_tokens_details.cached_tokens`` = cache read;
* ``prompt_tokens_details.cache_creation_tokens`` = cache creation: OpenAI has no name for it
  (it charges nothing extra for writing its cache), and folding it into ``cached_tokens``
  would price the dearest prompt tokens as the cheapest. The ``openai`` SDK keeps the field.

The counts are ``message_start``'s, overridden by every count ``message_delta`` carries (not
``null``), as the ``anthropic`` SDK accumulates them: ``message_delta``'s are cumulative.

**Stop reasons.** Every value of the ``anthropic`` SDK's ``StopReason`` has an entry in
:data:`FINISH`; a reason this table does not know is passed on as it came, so that a client
sees a ``finish_reason`` it cannot take for a finished answer (never a silent ``stop``).

``FINISH`` and ``to_openai`` are notebook 08's build-it, the same code (``chunk`` is
:mod:`solutions.responses_adapter`'s); ``tests/solutions/test_anthropic_adapter.py`` keeps
them so.
"""

from __future__ import annotations

import time
from typing import Any, Final

from solutions.responses_adapter import State, chunk

#: Anthropic's ``stop_reason`` -> OpenAI's ``finish_reason``.
FINISH: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",  # OpenAI says stop for a stop sequence too
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "pause_turn": "length",  # unfinished: the client sends the turn back to continue it
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def to_openai(event: str, data: dict[str, Any], state: State) -> list[dict[str, Any]]:
    """One Anthropic stream event -> a list of OpenAI chat.completion.chunk bodies."""
    kind = data.get("type", event)
    if kind == "message_start":
        message = data["message"]
        state.update(id=message["id"], model=message["model"], created=int(time.time()),
                     usage=message["usage"], tool_index={})  # fmt: skip
        return [chunk(state, {"role": "assistant", "content": ""})]
    if kind == "content_block_start" and data["content_block"]["type"] == "tool_use":
        block = data["content_block"]
        index = state["tool_index"].setdefault(data["index"], len(state["tool_index"]))
        call = {"index": index, "id": block["id"], "type": "function",
                "function": {"name": block["name"], "arguments": ""}}  # fmt: skip
        return [chunk(state, {"tool_calls": [call]})]
    delta = data.get("delta", {})
    if kind == "content_block_delta" and delta["type"] == "text_delta":
        return [chunk(state, {"content": delta["text"]})]
    if kind == "content_block_delta" and delta["type"] == "input_json_delta":
        index = state["tool_index"][data["index"]]
        fragment = {"index": index, "function": {"arguments": delta["partial_json"]}}
        return [chunk(state, {"tool_calls": [fragment]})]
    if kind == "message_delta":
        counts = {**state["usage"], **{k: v for k, v in data["usage"].items() if v is not None}}
        cached = counts.get("cache_read_input_tokens") or 0
        written = counts.get("cache_creation_input_tokens") or 0
        prompt = counts["input_tokens"] + cached + written
        usage = {"prompt_tokens": prompt, "completion_tokens": counts["output_tokens"],
                 "total_tokens": prompt + counts["output_tokens"],
                 "prompt_tokens_details": {"cached_tokens": cached,
                                           "cache_creation_tokens": written}}  # fmt: skip
        reason = data["delta"]["stop_reason"]
        finish = FINISH.get(reason, reason)  # unknown: passed on, never a silent "stop"
        return [chunk(state, {}, finish), {**chunk(state, {}), "choices": [], "usage": usage}]
    if kind == "error":
        error = data.get("error", {})
        return [{"error": {"message": error.get("message", "upstream error"),
                           "type": error.get("type", "upstream_error"), "param": None,
                           "code": None}}]  # fmt: skip
    return []  # ping, content_block_start (text), content_block_stop, message_stop: nothing
