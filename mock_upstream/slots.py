"""Slots, as an engine has them: at most N requests generate at once, the rest wait their turn.

llama.cpp's ``llama-server --parallel N`` and vLLM's scheduler (``max_num_seqs``) run a fixed
number of requests at once; one beyond that waits in a queue, first come first served, and is
sent no response headers until it is admitted. The scenario key ``slots`` asks for that::

    arrive --> [ waiting: FIFO ] --a slot frees--> running (holds the slot) --ends--> slot freed

A :class:`SlotPool` is N slots. A slot goes straight from the request that frees it to the
request that waited longest, so a newcomer never overtakes the queue. A waiter that is
cancelled (its client left, :mod:`mock_upstream.hangup`) leaves the queue at once, and if the
slot reached it in the same instant it passes the slot on. :class:`Slots` keeps one pool per
size for one app (``MockState.slots``): requests that resolve to the same ``slots`` value share
a pool, made the first time a request asks for it, on the app's event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import suppress


class SlotPool:
    """``size`` slots, given out first come first served."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a slot pool needs at least one slot, got size={size}")
        self.size = size
        self._busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def __repr__(self) -> str:
        return f"SlotPool(size={self.size}, busy={self.busy}, waiting={self.waiting})"

    @property
    def busy(self) -> int:
        """Slots held now."""
        return self._busy

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    def try_take(self) -> bool:
        """Take a free slot if there is one and nobody is waiting for it; never waits."""
        if self._busy < self.size and not self._waiters:
            self._busy += 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting behind every earlier waiter until one is given back."""
        if self.try_take():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # the slot reached us as we were cancelled: pass it on
            else:
                with suppress(ValueError):  # give_back may have dropped it already
                    self._waiters.remove(waiter)
            raise

    def give_back(self) -> None:
        """Free one slot: it goes to the longest waiter, if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # still busy: the slot changes hands
                return
        if self._busy == 0:
            raise RuntimeError(f"{self!r}: a slot was given back that nobody held")
        self._busy -= 1


class Slots:
    """One app's slot pools, one per size, each made when a request first asks for it."""

    def __init__(self) -> None:
        self._pools: dict[int, SlotPool] = {}

    def pool(self, size: int) -> SlotPool:
        """The pool every request with ``slots=size`` shares."""
        pool = self._pools.get(size)
        if pool is None:
            pool = self._pools[size] = SlotPool(size)
        return pool

    def pools(self) -> list[SlotPool]:
        """Every pool made so far, smallest first."""
        return [self._pools[size] for size in sorted(self._pools)]
