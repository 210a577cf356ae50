"""What ``resume_stop`` and ``resume_grace`` share: the usage log's lines for a resumable answer
that was cancelled (by Stop, or by the grace period), which must be exactly one, ``cancelled``.
No check of its own (no ``ID``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labkit.checks.result import Evidence
from labkit.checks.usage import read_log

__all__ = ["USAGE_ADVICE", "usage_evidence", "usage_lines", "usage_problem"]

USAGE_ADVICE = (
    "log a resumable answer's usage once, when its producer ends it: relay's finally runs once, "
    "cancelled for Stop and for the grace period, whatever its followers do."
)

Lines = tuple[Mapping[str, Any], ...]


async def usage_lines(log: Path | None, completion_id: object, wait_s: float) -> Lines | None:
    """The usage log's lines for ``completion_id`` (None: no log to read), waiting up to
    ``wait_s`` for the first one (0: read once)."""
    if log is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        lines, _ = await asyncio.to_thread(read_log, log)
        found = tuple(line for line in lines if line.get("id") == completion_id)
        if found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(0.05)


def usage_problem(lines: Lines | None) -> bool:
    """Whether the lines are not exactly one ``cancelled`` line (no log: nothing to judge)."""
    if lines is None:
        return False
    return len(lines) != 1 or lines[0].get("outcome") != "cancelled"


def usage_evidence(lines: Lines | None) -> Evidence:
    if lines is None:
        return {"usage_log": "not read"}
    outcomes = ",".join(str(line.get("outcome")) for line in lines)
    return {"usage_lines": len(lines), "usage_outcomes": outcomes}
