"""When each token goes out, and what happens at each injected fault.

Token ``j`` (counting from 0) is due at ``start + ttft + j / tps``, measured against the
event loop's clock from the moment the request arrived; a chunk of several tokens goes out
when its last token is due. Deadlines are absolute, so small scheduling delays do not add
up over a long stream; a stall pushes every later deadline back by its length.

Every wait is an ``await`` inside the body generator, including the wait for the first
token, so a client disconnect cancels the generation within one token interval.

Faults are small strategy objects (:class:`Stall`, :class:`Malformation`,
:class:`InStreamError`, :class:`ConnectionDrop`, :class:`Refusal`), each firing once when
exactly ``at`` tokens have been sent. :func:`faults_for` builds them from a scenario.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import ClassVar, Protocol

from mock_upstream.events import (
    TERMINAL,
    Delta,
    Dropped,
    Event,
    Failed,
    Finished,
    Malformed,
    Opened,
    PartStarted,
    PartStopped,
    Usage,
)
from mock_upstream.plan import Chunk, Plan
from mock_upstream.scenario import Scenario


class Clock:
    """Absolute token deadlines for one answer."""

    def __init__(self, ttft_s: float, tps: float, start: float | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time() if start is None else start
        self.ttft_s = ttft_s
        self.interval_s = 1.0 / tps
        self.shift_s = 0.0

    def due(self, token_index: int) -> float:
        """Loop time at which token ``token_index`` is due."""
        return self.start + self.ttft_s + token_index * self.interval_s + self.shift_s

    async def until(self, token_index: int) -> None:
        """Wait until the token is due (always awaits, so a cancellation is seen)."""
        await asyncio.sleep(max(0.0, self.due(token_index) - self.loop.time()))

    async def stall(self, seconds: float) -> None:
        """Go silent for ``seconds`` and push every later deadline back by as much."""
        await asyncio.sleep(seconds)
        self.shift_s += seconds


@dataclass(frozen=True)
class Progress:
    """What has been sent so far, for faults that end the answer."""

    prompt_tokens: int
    sent: int

    @property
    def usage(self) -> Usage:
        return Usage(self.prompt_tokens, self.sent)


class Fault(Protocol):
    @property
    def at(self) -> int: ...

    order: ClassVar[int]  # among faults at the same position, lower fires first

    async def fire(self, clock: Clock, progress: Progress) -> Event | None: ...


@dataclass(frozen=True)
class Stall:
    at: int
    seconds: float
    order: ClassVar[int] = 0

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        await clock.stall(self.seconds)
        return None


@dataclass(frozen=True)
class Malformation:
    at: int
    order: ClassVar[int] = 1

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Malformed()


@dataclass(frozen=True)
class Refusal:
    at: int
    order: ClassVar[int] = 2

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Finished("refusal", progress.usage)


@dataclass(frozen=True)
class InStreamError:
    at: int
    order: ClassVar[int] = 3

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Failed(progress.usage)


@dataclass(frozen=True)
class ConnectionDrop:
    at: int
    order: ClassVar[int] = 4

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Dropped()


def faults_for(scenario: Scenario) -> list[Fault]:
    """The scenario's faults in firing order."""
    faults: list[Fault] = []
    if scenario.stall_after is not None:
        faults.append(Stall(scenario.stall_after, scenario.stall_s))
    if scenario.malformed_after is not None:
        faults.append(Malformation(scenario.malformed_after))
    if scenario.refusal_after is not None:
        faults.append(Refusal(scenario.refusal_after))
    if scenario.error_after is not None:
        faults.append(InStreamError(scenario.error_after))
    if scenario.drop_after is not None:
        faults.append(ConnectionDrop(scenario.drop_after))
    return sorted(faults, key=lambda f: (f.at, f.order))


def _pieces(chunk: Chunk, sent: int, cuts: list[int]) -> list[Chunk]:
    """Split a chunk so that every fault position falls on a chunk boundary."""
    pieces: list[Chunk] = []
    tokens = chunk.tokens
    start = sent
    for cut in cuts:
        if start < cut < sent + len(chunk.tokens):
            pieces.append(Chunk(tokens[: cut - start]))
            tokens = tokens[cut - start :]
            start = cut
    pieces.append(Chunk(tokens))
    return pieces


async def play(plan: Plan, clock: Clock, faults: list[Fault]) -> AsyncGenerator[Event, None]:
    """Yield the answer's events, each at its due time; stops after a terminal event."""
    pending = list(faults)
    cuts = sorted({f.at for f in faults})
    sent = 0

    async def due() -> list[Event]:
        events: list[Event] = []
        while pending and pending[0].at <= sent:
            event = await pending.pop(0).fire(clock, Progress(plan.prompt_tokens, sent))
            if event is not None:
                events.append(event)
                if isinstance(event, TERMINAL):
                    break
        return events

    await clock.until(0)
    yield Opened()
    for index, part in enumerate(plan.parts):
        started = False
        for chunk in part.chunks:
            for piece in _pieces(chunk, sent, cuts):
                for event in await due():
                    yield event
                    if isinstance(event, TERMINAL):
                        return
                if not started:
                    yield PartStarted(index, part)
                    started = True
                await clock.until(sent + len(piece.tokens) - 1)
                sent += len(piece.tokens)
                yield Delta(index, part, piece.text, len(piece.tokens))
        yield PartStopped(index, part)
    for event in await due():
        yield event
        if isinstance(event, TERMINAL):
            return
    yield Finished(plan.finish, Usage(plan.prompt_tokens, sent))
