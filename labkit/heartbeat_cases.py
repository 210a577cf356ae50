"""Notebook 07's cases for the two parts it builds: ``upstream_timeout`` and ``next_item``.

The notebook states what each part must do and why, and the learner chooses the code; these are
the cases its check cells run on the learner's functions (and the instructor's grader on the
cells a learner hands in). They test properties, never one right value: any connect limit of a
few seconds passes, any ``next_item`` that hands items on at once, says ``None`` after
``HEARTBEAT_S`` of silence and loses nothing passes.

Each row is ``(the property, whether it holds, what was seen)``.
``tests/checks/test_heartbeat_cases.py`` runs them on the reference and on wrong designs: the
stand-ins, a bare ``httpx.Timeout(60)``, a heartbeat at once, a getter left behind in a task, a
timer that does not restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

__all__ = [
    "CONNECT_MAX_S",
    "POOL_MAX_S",
    "WRITE_MAX_S",
    "Row",
    "next_item_rows",
    "timeout_rows",
]

Row = tuple[str, bool, str]

# A host that has not accepted a connection within a few seconds is down: answer 502 soon.
CONNECT_MAX_S = 10.0
# A request body (at most 1 MB here) is sent in well under a second to a healthy upstream.
WRITE_MAX_S = 30.0
# Waiting longer than this for a free pooled connection only hides overload.
POOL_MAX_S = 30.0


def timeout_rows(
    default: httpx.Timeout,
    tuned: httpx.Timeout,
    idle_s: float,
    tuned_idle_s: float,
    longest_silence_s: float,
) -> list[Row]:
    """The properties of ``upstream_timeout()``: ``default`` is what it returns with
    ``proxy.py``'s own settings (``UPSTREAM_IDLE_S`` = ``idle_s``), ``tuned`` what it returns
    when ``UPSTREAM_IDLE_S`` is ``tuned_idle_s``. ``longest_silence_s`` is the longest a healthy
    upstream of this lab stays silent (before its first token, or in a pause)."""
    phases = {
        "connect": default.connect,
        "read": default.read,
        "write": default.write,
        "pool": default.pool,
    }
    shown = " ".join(f"{name}={value}" for name, value in phases.items())

    def at_most(value: float | None, limit: float) -> bool:
        return value is not None and 0 < value <= limit

    return [
        ("every phase has a limit (None waits for ever)", None not in phases.values(), shown),
        (
            f"connect fails fast: at most {CONNECT_MAX_S:g} s",
            at_most(default.connect, CONNECT_MAX_S),
            f"connect={default.connect}",
        ),
        (
            f"read outlasts a healthy silence of {longest_silence_s:g} s",
            default.read is not None and default.read > longest_silence_s,
            f"read={default.read}",
        ),
        (
            "read is the idle deadline UPSTREAM_IDLE_S",
            (default.read, tuned.read) == (idle_s, tuned_idle_s),
            f"read={default.read}, and {tuned.read} with UPSTREAM_IDLE_S={tuned_idle_s:g}",
        ),
        (
            f"write is bounded: at most {WRITE_MAX_S:g} s",
            at_most(default.write, WRITE_MAX_S),
            f"write={default.write}",
        ),
        (
            f"pool is bounded: at most {POOL_MAX_S:g} s",
            at_most(default.pool, POOL_MAX_S),
            f"pool={default.pool}",
        ),
    ]


async def next_item_rows(
    next_item: Callable[[asyncio.Queue[Any]], Awaitable[Any]],
    heartbeat_s: float,
    failure: Any,
) -> list[Row]:
    """The cases of ``next_item``, run with a ``proxy.py`` whose ``HEARTBEAT_S`` is
    ``heartbeat_s``; ``failure`` is an ``UpstreamFailed``. A call that has not returned after
    six heartbeats is given up on, and counts as "never"."""
    loop = asyncio.get_running_loop()
    give_up_s = 6 * heartbeat_s
    never = object()

    async def call(queue: asyncio.Queue[Any]) -> tuple[Any, float]:
        """What one call returned (``never``: nothing in time) and after how many seconds."""
        start = time.monotonic()
        try:
            item = await asyncio.wait_for(next_item(queue), give_up_s)
        except TimeoutError:
            item = never
        return item, time.monotonic() - start

    def seen(item: Any, took: float) -> str:
        what = "nothing" if item is never else repr(item)
        return f"{what} after {took:.2f} s"

    rows: list[Row] = []
    queue: asyncio.Queue[Any] = asyncio.Queue()
    queue.put_nowait("a")
    item, took = await call(queue)
    rows.append(
        (
            "an item already waiting comes back at once",
            item == "a" and took < heartbeat_s / 5,
            seen(item, took),
        )
    )

    queue = asyncio.Queue()
    loop.call_later(heartbeat_s / 10, queue.put_nowait, "b")
    item, took = await call(queue)
    rows.append(
        (
            "an item that arrives while it waits comes back then",
            item == "b" and took < heartbeat_s / 2,
            seen(item, took),
        )
    )

    queue = asyncio.Queue()
    item, took = await call(queue)
    rows.append(
        (
            "silence: None after about HEARTBEAT_S, not at once, not never",
            item is None and heartbeat_s / 2 <= took <= 4 * heartbeat_s,
            seen(item, took),
        )
    )

    queue.put_nowait("c")  # just after a heartbeat: nothing that gave up may take it
    await asyncio.sleep(heartbeat_s / 10)
    item, took = await call(queue)
    rows.append(
        (
            "the item after a heartbeat is not lost",
            item == "c" and took < heartbeat_s / 2,
            seen(item, took),
        )
    )

    queue = asyncio.Queue()
    for each in ("1", "2", failure):
        queue.put_nowait(each)
    got = [(await call(queue))[0] for _ in range(3)]
    rows.append(
        (
            "items come back in order, a failure among them",
            got == ["1", "2", failure],
            ", ".join("nothing" if g is never else repr(g) for g in got),
        )
    )

    queue = asyncio.Queue()
    steady = [loop.call_later(n * heartbeat_s / 5, queue.put_nowait, str(n)) for n in range(1, 7)]
    got = [(await call(queue))[0] for _ in range(6)]
    for handle in steady:
        handle.cancel()
    rows.append(
        (
            "a steady stream, an item every HEARTBEAT_S / 5, gets no heartbeat",
            got == [str(n) for n in range(1, 7)],
            ", ".join("nothing" if g is never else repr(g) for g in got),
        )
    )
    return rows
