"""How long the grader's own event loop was held up while an experiment ran.

A check times what its client sees, and its client runs in the grader's event loop beside the
other lanes' clients (``concurrency`` alone reads 110 streams there). On a machine shared with
other work that loop can fall seconds behind: bytes the proxy sent on time then sit in the
socket and are read, and timestamped, late. A check whose verdict rests on *when* something
arrived asks ``LoopWatch`` whether its own clock could be trusted: a task that sleeps ``TICK_S``
again and again, and keeps the longest overshoot (``worst_s``). A proxy in another process
cannot hold this loop up, so a long overshoot is the grader's pause, never the proxy's fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

__all__ = ["TICK_S", "LoopWatch", "watch_loop"]

TICK_S = 0.05


class LoopWatch:
    """The longest time, beyond ``TICK_S``, that a sleeping task waited to run again."""

    def __init__(self) -> None:
        self.worst_s = 0.0

    async def _tick(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(TICK_S)
            self.worst_s = max(self.worst_s, time.monotonic() - asked - TICK_S)


@contextlib.asynccontextmanager
async def watch_loop() -> AsyncIterator[LoopWatch]:
    """Watch the running event loop for as long as the block runs."""
    watch = LoopWatch()
    task = asyncio.create_task(watch._tick())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
