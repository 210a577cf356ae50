"""``feed_framer`` tells a framer that hands each event on at its blank line from one that waits
for more lines, and reports a stub, a coroutine and a framer that never ends as such."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from labkit.framing import feed_framer

LINES = ['data: {"n": 1}', "", "event: delta", "data: 2", "", "data: [DONE]", ""]
EVENTS = ['data: {"n": 1}', "event: delta\ndata: 2", "data: [DONE]"]


async def in_time(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    event: list[str] = []
    async for line in lines:
        if line:
            event.append(line)
        elif event:
            yield "\n".join(event)
            event = []


async def at_the_end(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    text = "\n".join([line async for line in lines])
    for block in text.split("\n\n"):
        if block.strip("\n"):
            yield block.strip("\n")


def test_a_framer_in_time_yields_each_event_after_its_blank_line() -> None:
    got = asyncio.run(feed_framer(in_time, LINES))
    assert got == list(zip(EVENTS, [2, 5, 7], strict=True))


def test_a_framer_that_waits_yields_every_event_after_the_last_line() -> None:
    got = asyncio.run(feed_framer(at_the_end, LINES, wait_s=0.01))
    assert got == [(event, len(LINES)) for event in EVENTS]


def test_a_stub_raises_its_own_error() -> None:
    async def stub(lines: AsyncIterator[str]) -> AsyncIterator[str]:
        raise NotImplementedError("Write this part yourself")

    with pytest.raises(NotImplementedError):
        asyncio.run(feed_framer(stub, LINES))


def test_a_framer_that_returns_instead_of_yielding_is_a_type_error() -> None:
    async def returns(lines: AsyncIterator[str]) -> list[str]:
        return [line async for line in lines]

    with pytest.raises(TypeError, match="make it an async generator"):
        asyncio.run(feed_framer(returns, LINES))


def test_a_framer_that_never_ends_times_out() -> None:
    async def forever(lines: AsyncIterator[str]) -> AsyncIterator[str]:
        async for line in lines:
            yield line
        await asyncio.sleep(60)
        yield "never"

    with pytest.raises(TimeoutError):
        asyncio.run(feed_framer(forever, LINES, wait_s=0.01, limit_s=0.2))
