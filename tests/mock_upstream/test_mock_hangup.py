"""``while_connected``: work beside a watcher of ``receive()``; whichever ends first cancels the
other. In process, with a scripted ``receive`` (the sockets tests are in test_mock_cancellation
and test_mock_slots)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mock_upstream.hangup import ClientLeft, while_connected


class Receive:
    """An ASGI ``receive`` that says what it is told, when it is told."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return await self.messages.get()

    def disconnect(self) -> None:
        self.messages.put_nowait({"type": "http.disconnect"})


def test_work_that_ends_first_gives_its_result_and_stops_the_watcher() -> None:
    async def main() -> None:
        receive = Receive()

        async def work() -> str:
            await asyncio.sleep(0)
            return "answer"

        assert await while_connected(receive, work()) == "answer"
        receive.disconnect()
        await asyncio.sleep(0)
        assert receive.messages.qsize() == 1  # the watcher was gone and took nothing

    asyncio.run(main())


def test_a_disconnect_cancels_the_work_at_its_next_await_and_raises_client_left() -> None:
    async def main() -> list[str]:
        receive = Receive()
        seen: list[str] = []

        async def work() -> str:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            return "too late"

        asyncio.get_running_loop().call_later(0.01, receive.disconnect)
        started = asyncio.get_running_loop().time()
        with pytest.raises(ClientLeft):
            await while_connected(receive, work())
        assert asyncio.get_running_loop().time() - started < 1.0
        return seen

    assert asyncio.run(main()) == ["cancelled"]


def test_other_messages_before_the_disconnect_are_not_a_hang_up() -> None:
    async def main() -> None:
        receive = Receive()
        receive.messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        done = asyncio.Event()

        async def work() -> int:
            await done.wait()
            return 7

        asyncio.get_running_loop().call_later(0.05, done.set)
        assert await while_connected(receive, work()) == 7
        assert receive.calls == 2  # read the stray message, then waited again

    asyncio.run(main())


def test_the_works_own_error_goes_through_unchanged() -> None:
    async def main() -> None:
        async def work() -> None:
            await asyncio.sleep(0)
            raise LookupError("the plan broke")

        with pytest.raises(LookupError, match="the plan broke"):
            await while_connected(Receive(), work())

    asyncio.run(main())


def test_cancelling_the_caller_cancels_the_work_and_the_watcher() -> None:
    async def main() -> None:
        receive = Receive()
        cancelled: list[str] = []

        async def work() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append("work")
                raise

        caller = asyncio.create_task(while_connected(receive, work()))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert cancelled == ["work"]
        receive.disconnect()
        await asyncio.sleep(0)
        assert receive.messages.qsize() == 1  # no watcher left to take it

    asyncio.run(main())
