"""When each token goes out, and what happens at each injected fault.

Token ``j`` (counting from 0) is due at ``start + ttft + j / tps``, measured against the
event loop's clock from the moment the request arrived (or, if it waited for a slot, was
admitted: :mod:`mock_upstream.slots`); a chunk of several tokens goes out
when its last token is due. Deadlines are absolute, so small scheduling delays do not add
up over a long stream; a stall pushes every later deadline back by its length.

Every wait is an ``await`` in the generation (a task of its own, or the body generator with
``pause_on_backpressure``: :mod:`mock_upstream.generation`), including the wait for the first
token, so a client disconnect cancels the generation at once, never later than one token
interval. With
``comment_every_ms`` the waits are cut into pieces: a :class:`~mock_upstream.events.Comment`
is due every that many ms from the start (before the first token and during a stall too, as
OpenRouter's ``: OPENROUTER PROCESSING``). Which of a comment and a token comes first is
decided from their due times, never from the clock, so the order is the same on any machine.

Faults are small strategy objects (:class:`Stall`, :class:`Malformation`,
:class:`InStreamError`, :class:`ConnectionDrop`, :class:`CleanEnd`, :class:`Refusal`), each
firing once when
exactly ``at`` tokens have been sent. :func:`faults_for` builds them from a scenario. An error
or a drop at position 0 fires before the answer opens: ``error_after=0`` makes the error the
first event of the 200 (as vLLM sends a failure before its first token), nothing before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import ClassVar, Protocol

from mock_upstream.events import (
    TERMINAL,
    Comment,
    Delta,
    Dropped,
    Ended,
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
    """Absolute token deadlines for one answer, and the comments due between them."""

    def __init__(
        self,
        ttft_s: float,
        tps: float,
        start: float | None = None,
        *,
        comment_every_s: float | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time() if start is None else start
        self.ttft_s = ttft_s
        self.interval_s = 1.0 / tps
        self.shift_s = 0.0
        self.comment_every_s = comment_every_s
        self.next_comment = None if comment_every_s is None else self.start + comment_every_s

    def due(self, token_index: int) -> float:
        """Loop time at which token ``token_index`` is due."""
        return self.start + self.ttft_s + token_index * self.interval_s + self.shift_s

    async def until(self, token_index: int) -> AsyncGenerator[Comment, None]:
        """Wait until the token is due (always awaits, so a cancellation is seen), yielding
        each comment that falls due before it."""
        deadline = self.due(token_index)
        while self.next_comment is not None and self.next_comment < deadline:
            await asyncio.sleep(max(0.0, self.next_comment - self.loop.time()))
            assert self.comment_every_s is not None
            self.next_comment += self.comment_every_s
            yield Comment()
        await asyncio.sleep(max(0.0, deadline - self.loop.time()))

    def stall(self, seconds: float) -> None:
        """Go silent for ``seconds``: push every later deadline back by as much (the next
        wait then lasts that much longer)."""
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
    before_opening: ClassVar[bool]  # at position 0: fires before the answer opens

    async def fire(self, clock: Clock, progress: Progress) -> Event | None: ...


@dataclass(frozen=True)
class Stall:
    at: int
    seconds: float
    order: ClassVar[int] = 0
    before_opening: ClassVar[bool] = False

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        clock.stall(self.seconds)
        return None


@dataclass(frozen=True)
class Malformation:
    at: int
    order: ClassVar[int] = 1
    before_opening: ClassVar[bool] = False

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Malformed()


@dataclass(frozen=True)
class Refusal:
    at: int
    order: ClassVar[int] = 2
    before_opening: ClassVar[bool] = False

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Finished("refusal", progress.usage)


@dataclass(frozen=True)
class InStreamError:
    at: int
    order: ClassVar[int] = 3
    before_opening: ClassVar[bool] = True

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Failed(progress.usage)


@dataclass(frozen=True)
class ConnectionDrop:
    at: int
    order: ClassVar[int] = 4
    before_opening: ClassVar[bool] = True

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Dropped()


@dataclass(frozen=True)
class CleanEnd:
    at: int
    order: ClassVar[int] = 5
    before_opening: ClassVar[bool] = True

    async def fire(self, clock: Clock, progress: Progress) -> Event | None:
        return Ended()


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
    if scenario.end_after is not None:
        faults.append(CleanEnd(scenario.end_after))
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

    async def due(*, opening: bool = False) -> list[Event]:
        events: list[Event] = []
        for fault in [f for f in pending if f.at <= sent and (f.before_opening or not opening)]:
            pending.remove(fault)
            event = await fault.fire(clock, Progress(plan.prompt_tokens, sent))
            if event is not None:
                events.append(event)
                if isinstance(event, TERMINAL):
                    break
        return events

    async for comment in clock.until(0):
        yield comment
    for event in await due(opening=True):
        yield event
        if isinstance(event, TERMINAL):
            return
    yield Opened()
    started: set[int] = set()
    for index, chunk, last in plan.steps():
        part = plan.parts[index]
        for piece in _pieces(chunk, sent, cuts):
            for event in await due():
                yield event
                if isinstance(event, TERMINAL):
                    return
            if index not in started:
                yield PartStarted(index, part)
                started.add(index)
            async for comment in clock.until(sent + len(piece.tokens) - 1):
                yield comment
            sent += len(piece.tokens)
            yield Delta(index, part, piece.text, len(piece.tokens))
        if last:
            yield PartStopped(index, part)
    for event in await due():
        yield event
        if isinstance(event, TERMINAL):
            return
    async for comment in clock.until(max(sent - 1, 0)):  # a stall after the last token
        yield comment
    yield Finished(plan.finish, Usage(plan.prompt_tokens, sent))
