"""``LoopWatch`` sees a hold-up of the event loop it runs in (in process: a blocking sleep)."""

from __future__ import annotations

import asyncio
import time

from labkit.checks.loop_watch import TICK_S, watch_loop

HELD_S = 0.3


def test_a_blocked_event_loop_shows_as_the_watchs_worst_pause() -> None:
    async def main() -> float:
        async with watch_loop() as watch:
            await asyncio.sleep(2 * TICK_S)  # the watch is ticking
            time.sleep(HELD_S)  # noqa: ASYNC251  (the hold-up under test)
            await asyncio.sleep(2 * TICK_S)  # the watch wakes and measures it
        return watch.worst_s

    # the watch slept TICK_S and woke only after the hold-up: at least HELD_S - TICK_S late
    assert asyncio.run(main()) >= HELD_S - TICK_S
