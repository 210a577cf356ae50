"""Feed a framer lines the way an upstream sends them, and note when each event came out.

A framer (notebook 03's ``sse_events``) turns an async iterator of lines into an async iterator
of events. Whether it is right is a question of time as well as of text: an event must come out
the moment its blank line arrives, not when the next line or the end of the stream does. So the
upstream here is patient: after each blank line it waits (at most ``wait_s``) until the event
that line completed has been received, as a real upstream sends its next token only later. A
framer that hands each event on in time yields it after exactly the lines up to its blank line;
one that waits for more yields it later, and the count of lines taken by then shows it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

__all__ = ["FEED_LIMIT_S", "FEED_WAIT_S", "feed_framer"]

FEED_WAIT_S = 0.5  # after a blank line, at most this long for the event it completed
FEED_LIMIT_S = 10.0  # for the whole feed: a framer that never ends is stopped


async def feed_framer(
    framer: Callable[[AsyncIterator[str]], Any],
    lines: Sequence[str],
    *,
    wait_s: float = FEED_WAIT_S,
    limit_s: float = FEED_LIMIT_S,
) -> list[tuple[str, int]]:
    """Each event ``framer`` yields for ``lines`` (strings without line endings, as
    ``response.aiter_lines()`` gives them), with how many of them it had taken by then.

    Raises what the framer raises (``NotImplementedError`` from a learner's stub), ``TypeError``
    when it returns instead of yielding (an ``async def`` without a ``yield``), and
    ``TimeoutError`` when it has not finished after ``limit_s`` seconds."""
    taken = 0
    received = asyncio.Event()

    async def upstream_lines() -> AsyncIterator[str]:
        nonlocal taken
        for line in lines:
            taken += 1
            yield line
            if line == "":  # the next line comes once its event has been received
                try:
                    await asyncio.wait_for(received.wait(), wait_s)
                except TimeoutError:
                    pass
                received.clear()

    events = framer(upstream_lines())
    if inspect.iscoroutine(events):  # an async def without a yield (a learner's stub is one)
        await events  # a stub raises NotImplementedError here
        raise TypeError("it returned instead of yielding: make it an async generator (yield)")
    got: list[tuple[str, int]] = []
    async with asyncio.timeout(limit_s):
        async for event in events:
            got.append((event, taken))
            received.set()
    return got
