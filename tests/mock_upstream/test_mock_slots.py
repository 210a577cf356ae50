"""``slots``: an engine's queue. At most N requests run at once; the next waits first come first
served with no headers sent, is dropped at once if its client leaves, and starts its clock when
it gets a slot; a slot is freed when generation ends, however it ends.

Over real sockets, each request is a raw connection the test reads or hangs up on itself. The
request that holds the slot is a 400-token answer at 20 tokens/s (20 s) that the test ends by
hanging up, so "still waiting" and "admitted" are never decided by a race: a queue that did not
hold a request would answer it within milliseconds, one that held it too long would never
answer within the seconds the test waits.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mock_support import (
    ACTIVE,
    FAST,
    USER,
    LiveServer,
    live_server,
    raw_request,
    read_head,
)

from labkit.capture import SLOW_READER_RCVBUF
from mock_upstream.slots import SlotPool, Slots

CHAT = "/v1/chat/completions"
#: Holds its slot for 20 s unless its client hangs up.
HOLD = {"slots": 1, "ttft_ms": 0, "tps": 20, "tokens": 400}
#: Done in a few milliseconds once it runs.
QUICK = {"slots": 1, "ttft_ms": 0, "tps": 1000, "tokens": 5}
#: A hang-up is noticed within one token interval; a queue that kept the request would keep it.
MARGIN_S = 0.2
#: No header may arrive this long after the request while it waits (an unqueued one: ~ms).
SILENT_S = 0.5


def chat(seed: int, *, stream: bool = True, **scenario: object) -> dict[str, Any]:
    return {
        "model": "mock-gpt",
        "messages": USER,
        "stream": stream,
        "mock": {**scenario, "seed": seed},
    }


def running(record: dict[str, Any]) -> bool:
    return bool(record["state"] == "running")


def queued(record: dict[str, Any]) -> bool:
    return bool(record["state"] == "queued")


def ended(record: dict[str, Any]) -> bool:
    return record["state"] not in ACTIVE


class Connections:
    """The raw connections a test opened, closed at its end."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.open: list[socket.socket] = []

    def send(self, seed: int, *, stream: bool = True, **scenario: object) -> socket.socket:
        sock = raw_request(self.server.url, CHAT, chat(seed, stream=stream, **scenario))
        self.open.append(sock)
        return sock

    def holder(self, seed: int) -> socket.socket:
        """A stream that holds the one slot until the test hangs it up."""
        sock = self.send(seed, **HOLD)
        self.server.wait_for(seed, running)
        return sock

    def waiter(self, seed: int, *, stream: bool = True, **scenario: object) -> socket.socket:
        """A request that waits for the slot (its record says ``queued`` before this returns)."""
        sock = self.send(seed, stream=stream, **{**QUICK, **scenario})
        self.server.wait_for(seed, queued)
        return sock

    def close(self) -> None:
        for sock in self.open:
            sock.close()


@pytest.fixture
def connections(server: LiveServer) -> Iterator[Connections]:
    opened = Connections(server)
    try:
        yield opened
    finally:
        opened.close()
        server.wait_until_idle()


# -- over sockets -------------------------------------------------------------------------------


@pytest.mark.sockets
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_a_request_beyond_its_slots_waits_with_no_headers_until_a_slot_frees(
    server: LiveServer, connections: Connections, stream: bool
) -> None:
    holder = connections.holder(1)
    waiter = connections.waiter(2, stream=stream)
    record = server.record(2)
    assert record is not None
    assert record["queued_at"] is not None and record["admitted_at"] is None
    assert (record["tokens_generated"], record["first_token_at"]) == (0, None)
    assert read_head(waiter, SILENT_S) == b""  # not even a status line while it waits

    holder.close()
    head = read_head(waiter, 5.0)
    assert head.startswith(b"HTTP/1.1 200 OK"), head
    first = server.wait_for(1, ended)
    second = server.wait_for(2, ended)
    assert second["state"] == "completed"
    assert second["admitted_at"] >= first["ended_at"]
    assert second["queued_at"] < first["ended_at"]


@pytest.mark.sockets
def test_waiting_requests_are_admitted_first_come_first_served_one_at_a_time(
    server: LiveServer, connections: Connections
) -> None:
    holder = connections.holder(10)
    for seed in (11, 12, 13):
        connections.waiter(seed, stream=False)
    holder.close()
    records = [server.wait_for(seed, ended) for seed in (10, 11, 12, 13)]
    assert [r["state"] for r in records[1:]] == ["completed"] * 3
    for earlier, later in itertools.pairwise(records):
        assert earlier["queued_at"] is None or later["queued_at"] > earlier["queued_at"]
        assert later["admitted_at"] >= earlier["ended_at"]  # the slot was free by then


@pytest.mark.sockets
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_a_waiting_request_whose_client_leaves_is_dropped_at_once_and_never_runs(
    server: LiveServer, connections: Connections, stream: bool
) -> None:
    holder = connections.holder(20)
    leaver = connections.waiter(21, stream=stream)
    leaver.close()
    closed_at = time.time()
    record = server.wait_for(21, ended)
    assert record["state"] == "cancelled"
    assert record["disconnected_at"] - closed_at < MARGIN_S
    assert record["admitted_at"] is None and record["queued_at"] is not None
    assert (record["tokens_generated"], record["first_token_at"]) == (0, None)
    assert server.metric("mock_requests_waiting") == 0
    assert server.record(20) is not None and server.record(20)["state"] == "running"

    # it left the queue and took nothing with it: the next one gets the slot when it frees
    connections.waiter(22, stream=False)
    holder.close()
    assert server.wait_for(22, ended)["state"] == "completed"
    assert server.record(21) == record


@pytest.mark.sockets
def test_a_waiting_requests_first_token_is_due_ttft_after_its_admission(
    server: LiveServer, connections: Connections
) -> None:
    """Bug it prevents: a clock started at arrival makes a request that waited longer than its
    TTFT send its first token the instant it is admitted (about 0 s instead of 0.4 s)."""
    holder = connections.holder(30)
    connections.waiter(31, ttft_ms=400)
    time.sleep(0.8)  # twice its TTFT in the queue
    holder.close()
    record = server.wait_for(31, ended)
    assert record["state"] == "completed"
    assert 0.35 <= record["first_token_at"] - record["admitted_at"] < 2.0


@pytest.mark.sockets
@pytest.mark.parametrize(
    "fate",
    [
        {"stream": True},
        {"stream": True, "error_after": 3},
        {"stream": True, "drop_after": 3},
        {"stream": True, "end_after": 3},
        {"stream": False},
        {"stream": False, "error_after": 3},
    ],
    ids=["completed", "error", "drop", "clean_end", "unary", "unary_500"],
)
def test_a_slot_is_given_back_however_the_answer_that_held_it_ends(
    server: LiveServer, connections: Connections, fate: dict[str, Any]
) -> None:
    stream = bool(fate.pop("stream"))
    connections.send(40, stream=stream, **{**QUICK, "ttft_ms": 600, "tps": 100, **fate})
    server.wait_for(40, running)
    connections.waiter(41, stream=False)
    first = server.wait_for(40, ended)
    second = server.wait_for(41, ended)
    assert second["state"] == "completed"
    assert second["queued_at"] is not None
    assert second["admitted_at"] >= first["ended_at"]


@pytest.fixture
def narrow_server() -> Iterator[LiveServer]:
    yield from live_server(FAST, send_buffer=16_384)


@pytest.mark.sockets
def test_a_slot_is_freed_when_generation_ends_while_the_reader_is_still_behind(
    narrow_server: LiveServer,
) -> None:
    """As on an engine, a slot is the generation's, not the socket's: an answer generated to
    its end frees its slot although its reader (reading nothing) has most of it still to come.
    About a megabyte of frames against ~150 KB the reader's buffers hold."""
    body = chat(50, slots=1, ttft_ms=0, tps=20_000, tokens=20_000)
    reader = raw_request(narrow_server.url, CHAT, body, rcvbuf=SLOW_READER_RCVBUF)
    try:
        narrow_server.wait_for(50, running)
        waiter = raw_request(narrow_server.url, CHAT, chat(51, stream=False, **QUICK))
        try:
            second = narrow_server.wait_for(51, ended, timeout=30.0)
            first = narrow_server.record(50)
            assert first is not None
            assert second["state"] == "completed" and second["queued_at"] is not None
            assert first["state"] == "completed"
            assert first["tokens_sent"] < first["tokens_generated"] // 2
        finally:
            waiter.close()
    finally:
        reader.close()
    narrow_server.wait_until_idle()


@pytest.mark.sockets
def test_the_gauges_count_waiting_requests_apart_from_running_ones(
    server: LiveServer, connections: Connections
) -> None:
    holder = connections.holder(60)
    leavers = [connections.waiter(seed) for seed in (61, 62)]
    text = server.client.get("/metrics").text
    assert server.metric("mock_requests_running") == 1
    assert server.metric("mock_requests_waiting") == 2
    assert '\nvllm:num_requests_running{model_name="mock-gpt"} 1.0\n' in text
    assert '\nvllm:num_requests_waiting{model_name="mock-gpt"} 2.0\n' in text
    for sock in [*leavers, holder]:
        sock.close()
    server.wait_until_idle()
    assert server.metric("mock_requests_running") == server.metric("mock_requests_waiting") == 0


@pytest.mark.sockets
def test_a_reset_keeps_waiting_requests_and_their_count(
    server: LiveServer, connections: Connections
) -> None:
    holder = connections.holder(70)
    connections.waiter(71, stream=False)
    assert server.client.post("/debug/reset").json() == {"reset": True, "running": 1, "waiting": 1}
    assert [r["state"] for r in server.records()] == ["running", "queued"]
    assert server.metric("mock_requests_waiting") == 1
    holder.close()
    assert server.wait_for(71, ended)["state"] == "completed"
    assert server.metric("mock_requests_completed_total") == 1


@pytest.mark.sockets
def test_requests_with_another_slot_count_or_none_do_not_wait_for_these_slots(
    server: LiveServer, connections: Connections
) -> None:
    connections.holder(80)
    unlimited = {key: value for key, value in QUICK.items() if key != "slots"}
    for seed, scenario in [(81, {**unlimited, "slots": 2}), (82, unlimited)]:
        response = server.client.post(CHAT, json=chat(seed, stream=False, **scenario))
        assert response.status_code == 200
        record = server.record(seed)
        assert record is not None and record["state"] == "completed"
        assert record["queued_at"] is None and record["admitted_at"] == record["started_at"]


@pytest.mark.sockets
def test_two_apps_keep_their_slots_apart(
    server: LiveServer, fresh_server: LiveServer, connections: Connections
) -> None:
    connections.holder(90)
    response = fresh_server.client.post(CHAT, json=chat(91, stream=False, **QUICK))
    assert response.status_code == 200
    assert fresh_server.last()["queued_at"] is None


@pytest.mark.sockets
def test_the_apps_default_slots_apply_to_requests_that_do_not_name_them() -> None:
    for server in live_server(FAST.merged({"slots": 1})):
        holder = raw_request(server.url, CHAT, chat(100, ttft_ms=0, tps=20, tokens=400))
        try:
            server.wait_for(100, running)
            waiter = raw_request(server.url, CHAT, chat(101, stream=False))
            try:
                server.wait_for(101, queued)
            finally:
                waiter.close()
        finally:
            holder.close()
        server.wait_until_idle()


# -- the pool, without a server ------------------------------------------------------------------


def test_a_freed_slot_goes_to_the_longest_waiter_and_no_newcomer_overtakes() -> None:
    async def main() -> list[str]:
        pool = SlotPool(1)
        assert pool.try_take()
        admitted: list[str] = []

        async def wait(name: str) -> None:
            await pool.take()
            admitted.append(name)

        tasks = [asyncio.create_task(wait(name)) for name in "abc"]
        await asyncio.sleep(0)
        assert (pool.busy, pool.waiting) == (1, 3)
        pool.give_back()
        assert not pool.try_take()  # the slot went to "a", not to whoever asks next
        await asyncio.sleep(0)
        for _ in "bc":
            pool.give_back()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        pool.give_back()
        assert (pool.busy, pool.waiting) == (0, 0)
        return admitted

    assert asyncio.run(main()) == ["a", "b", "c"]


def test_a_cancelled_waiter_leaves_the_queue_or_passes_on_the_slot_it_just_got() -> None:
    async def main() -> None:
        pool = SlotPool(1)
        assert pool.try_take()
        first, second, third = (asyncio.create_task(pool.take()) for _ in range(3))
        await asyncio.sleep(0)
        first.cancel()  # gone before the slot frees
        await asyncio.sleep(0)
        assert pool.waiting == 2
        pool.give_back()  # to second...
        second.cancel()  # ...cancelled in the same instant: it passes the slot to third
        await asyncio.gather(first, second, return_exceptions=True)
        await third
        assert (pool.busy, pool.waiting) == (1, 0)
        pool.give_back()
        assert pool.busy == 0

    asyncio.run(main())


def test_giving_back_a_slot_nobody_holds_is_an_error_that_says_so() -> None:
    with pytest.raises(RuntimeError, match=r"a slot was given back that nobody held"):
        SlotPool(2).give_back()
    with pytest.raises(ValueError, match=r"at least one slot, got size=0"):
        SlotPool(0)


def test_an_apps_pools_are_one_per_size() -> None:
    slots = Slots()
    assert slots.pool(2) is slots.pool(2)
    assert slots.pool(1) is not slots.pool(2)
    assert [p.size for p in slots.pools()] == [1, 2]
