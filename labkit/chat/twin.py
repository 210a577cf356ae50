"""The chat page's state machine written again in Python, and the six fates notebook 14's
``predict`` part is graded on, read without a browser.

``page_input`` follows the page's ``inputOf`` and ``page_state`` its ``nextState`` (page.html,
between the machine's marker lines), rule by rule. A test
(``tests/notebooks/test_page_machine_in_python.py``) pins the JavaScript by its digest, so a
change to the page's machine fails there until this twin is brought along. ``page_ends``
streams each fate through a proxy and reads its events as the page would: how the learner's
predictions are judged, the same on any machine, with or without Chromium.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, Final

from labkit.capture import capture_stream
from labkit.upstream import chat_request

__all__ = ["FATES", "STOP_FATE", "TERMINAL", "page_ends", "page_input", "page_state"]

TERMINAL: Final = ("completed", "interrupted", "cancelled")
STOP_FATE: Final = "Stop after a few tokens"
STOP_AFTER_EVENTS: Final = 3  # the Stop fate's client hangs up after this many events

#: Notebook 14's six fates (its section 6), as the mock's scenario for each.
FATES: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        "normal answer": {"ttft_ms": 150, "tps": 50, "tokens": 20},
        STOP_FATE: {"ttft_ms": 200, "tps": 20, "tokens": 400},
        "upstream drops after 5 tokens": {"ttft_ms": 150, "tps": 50, "tokens": 20, "drop_after": 5},
        "refusal after 5 tokens": {"ttft_ms": 150, "tps": 50, "tokens": 20, "refusal_after": 5},
        "upstream error after 5 tokens": {
            "ttft_ms": 150,
            "tps": 50,
            "tokens": 20,
            "error_after": 5,
        },
        "429 before the stream": {
            "ttft_ms": 150,
            "tps": 50,
            "tokens": 20,
            "status": 429,
            "retry_after": 1,
        },
    }
)


def page_input(data: str) -> str:
    """The page's ``inputOf``: what one SSE event's data means to the page."""
    if data.strip() == "[DONE]":
        return "done"
    chunk = _json_object(data)
    if chunk is None:  # not JSON, or not an object: the page skips it
        return "ignore"
    if "error" in chunk:
        return "error"
    first = (chunk.get("choices") or [None])[0]
    choice: dict[str, Any] = first if isinstance(first, dict) else {}
    delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
    if delta.get("refusal"):
        return "refusal"
    if delta.get("content"):
        return "token"
    if choice.get("finish_reason") == "content_filter":
        return "refusal"
    return "finish" if choice.get("finish_reason") else "ignore"


def _json_object(data: str) -> dict[str, Any] | None:
    """``data`` parsed, if it is a JSON object."""
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def page_state(inputs: Iterable[str]) -> str:
    """The page's ``nextState``, folded: the state after ``inputs``, from ``connecting``."""
    state = "connecting"
    for given in inputs:
        if state in TERMINAL:
            break
        if given == "cancel":
            state = "cancelled"
        elif given in ("error", "eof", "refusal"):
            state = "interrupted"
        elif given == "done":
            state = "completed"
        elif given == "token":
            state = "generating"
        elif given == "drop":
            state = "reconnecting"
    return state


def page_ends(url: str, first_seed: int, prompt: str) -> dict[str, tuple[str, bool]]:
    """``{fate: (final state, ever marked complete)}``: each fate streamed through the proxy at
    ``url`` (its chat route) without a browser, its events read as the page reads them; the Stop
    fate's client hangs up after ``STOP_AFTER_EVENTS`` events. Seeds from ``first_seed``."""

    def end_of(number: int, fate: str) -> tuple[str, bool]:
        stop = fate == STOP_FATE
        seen = capture_stream(
            url + "/v1/chat/completions",
            json=chat_request(first_seed + number, prompt=prompt, **FATES[fate]),
            headers={"accept": "text/event-stream"},
            disconnect_after_events=STOP_AFTER_EVENTS if stop else None,
        )
        if seen.status is None or seen.status >= 400:
            inputs = ["error"]  # the page shows the status as an error
        else:
            inputs = [page_input(event.data) for event in seen.events]
            inputs.append("cancel" if stop else "eof")
        state = page_state(inputs)
        return state, state == "completed"  # data-complete: set only in completed, which stays

    with ThreadPoolExecutor(len(FATES)) as pool:
        ends = {fate: pool.submit(end_of, number, fate) for number, fate in enumerate(FATES)}
        return {fate: future.result() for fate, future in ends.items()}
