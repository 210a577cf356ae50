"""Server-sent-event frames: ``event:`` (optional) and ``data:`` lines, then a blank line."""

from __future__ import annotations

import json
from typing import Any


def dumps(payload: Any) -> str:
    """Compact JSON, as the providers send it."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def frame(payload: Any, event: str | None = None) -> str:
    """One SSE frame carrying ``payload`` as JSON (or as-is when it is a ``str``)."""
    data = payload if isinstance(payload, str) else dumps(payload)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n"
