"""Notebook 07's cases pass the reference ``upstream_timeout`` and ``next_item`` and fail wrong
designs: each wrong design below fails the rows named beside it, and only those."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from labkit import heartbeat_cases
from labkit.heartbeat_cases import next_item_rows, timeout_rows
from solutions import proxy

HEARTBEAT_S = 0.5
LONGEST_SILENCE_S = 6.0
TUNED_IDLE_S = 1.5


def _failed(rows: list[heartbeat_cases.Row]) -> list[int]:
    return [number for number, (_, holds, _) in enumerate(rows) if not holds]


def test_the_reference_timeouts_have_every_property() -> None:
    default = proxy.upstream_timeout()
    tuned = httpx.Timeout(connect=5.0, read=TUNED_IDLE_S, write=10.0, pool=10.0)
    rows = timeout_rows(default, tuned, proxy.UPSTREAM_IDLE_S, TUNED_IDLE_S, LONGEST_SILENCE_S)
    assert _failed(rows) == [], rows


def _same_for_any_idle(timeout: httpx.Timeout) -> list[int]:
    return _failed(
        timeout_rows(timeout, timeout, proxy.UPSTREAM_IDLE_S, TUNED_IDLE_S, LONGEST_SILENCE_S)
    )


@pytest.mark.parametrize(
    ("design", "timeout", "failed"),
    [
        ("the stand-in, httpx's 5 s default", httpx.Timeout(5.0), [2, 3]),
        ("no timeout at all", httpx.Timeout(None), [0, 1, 2, 3, 4, 5]),
        ("60 s for everything", httpx.Timeout(60.0), [1, 3, 4, 5]),
        ("no read deadline", httpx.Timeout(5.0, read=None), [0, 2, 3]),
        ("no pool limit", httpx.Timeout(5.0, read=60.0, pool=None), [0, 3, 5]),
    ],
)
def test_a_wrong_timeout_design_fails_the_properties_it_breaks(
    design: str, timeout: httpx.Timeout, failed: list[int]
) -> None:
    assert _same_for_any_idle(timeout) == failed, design


def test_a_read_deadline_that_ignores_the_setting_fails_that_row_only() -> None:
    fixed = httpx.Timeout(connect=5.0, read=120.0, write=10.0, pool=10.0)
    rows = timeout_rows(fixed, fixed, proxy.UPSTREAM_IDLE_S, TUNED_IDLE_S, LONGEST_SILENCE_S)
    assert _failed(rows) == [3]


NextItem = Callable[[asyncio.Queue[Any]], Awaitable[Any]]


async def at_once_when_empty(queue: asyncio.Queue[Any]) -> Any:
    """Wrong: a heartbeat whenever nothing is waiting, so a silent upstream floods the client."""
    return None if queue.empty() else queue.get_nowait()


async def always_waits(queue: asyncio.Queue[Any]) -> Any:
    """Wrong: sleeps a heartbeat before looking, so every token is late."""
    await asyncio.sleep(HEARTBEAT_S)
    return None if queue.empty() else queue.get_nowait()


_left_behind: set[asyncio.Task[Any]] = set()


async def leaves_a_getter_behind(queue: asyncio.Queue[Any]) -> Any:
    """Wrong: gives up on a get it does not cancel; that get takes the next item for nobody."""
    getter = asyncio.ensure_future(queue.get())
    _left_behind.add(getter)
    done, _ = await asyncio.wait({getter}, timeout=HEARTBEAT_S)
    return getter.result() if done else None


_deadline: list[float] = []


async def timer_never_restarts(queue: asyncio.Queue[Any]) -> Any:
    """Wrong: one heartbeat timer for the whole stream, not one per silence."""
    loop = asyncio.get_running_loop()
    if not _deadline:
        _deadline.append(loop.time() + HEARTBEAT_S)
    try:
        async with asyncio.timeout_at(_deadline[0]):
            return await queue.get()
    except TimeoutError:
        _deadline.clear()
        return None


async def stand_in(queue: asyncio.Queue[Any]) -> Any:
    """The learner copy's stand-in: waits for ever."""
    return await queue.get()


def _rows(next_item: NextItem) -> list[heartbeat_cases.Row]:
    failure = proxy.UpstreamFailed("the upstream stream failed: ReadTimeout")
    return asyncio.run(next_item_rows(next_item, HEARTBEAT_S, failure))


def test_the_reference_next_item_passes_every_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy, "HEARTBEAT_S", HEARTBEAT_S)
    rows = _rows(proxy.next_item)
    assert _failed(rows) == [], rows


@pytest.mark.parametrize(
    ("next_item", "failed"),
    [
        (stand_in, [2]),
        (at_once_when_empty, [1, 2, 5]),
        (always_waits, [0, 1, 3]),
        (leaves_a_getter_behind, [3]),
        (timer_never_restarts, [5]),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_wrong_next_item_fails_the_cases_it_breaks(
    next_item: NextItem, failed: list[int]
) -> None:
    _deadline.clear()
    assert _failed(_rows(next_item)) == failed
