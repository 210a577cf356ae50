"""Behaviour of the pinned libraries that a lesson depends on.

If one of these fails after an upgrade, the lesson that cites it is wrong: fix the lesson,
then the pin. A comment at the top of each test names the lesson that relies on the fact.
"""

from __future__ import annotations

import asyncio
import zlib

import httpx
import pytest

from labkit import serve
from mock_upstream import create_app


def test_httpx_default_timeout_is_five_seconds_for_every_phase() -> None:
    # Lesson 07: a proxy built on a bare AsyncClient() kills a first token slower than 5 s.
    timeout = httpx.AsyncClient().timeout
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (5.0, 5.0, 5.0, 5.0)


def test_zlib_holds_small_writes_until_a_sync_flush() -> None:
    # Lesson 03: a gzip layer that never flushes turns a stream into one burst at the end.
    compressor = zlib.compressobj(wbits=31)
    header = compressor.compress(b'data: {"delta": "Hello"}\n\n')
    held = compressor.compress(b'data: {"delta": " world"}\n\n')
    flushed = compressor.flush(zlib.Z_SYNC_FLUSH)
    assert len(header) <= 10  # at most the gzip header: no event has left the compressor
    assert held == b""
    decoded = zlib.decompressobj(wbits=31).decompress(header + held + flushed)
    assert decoded == b'data: {"delta": "Hello"}\n\ndata: {"delta": " world"}\n\n'


@pytest.mark.parametrize(("keepalive", "kept"), [(2, 4), (10, 5)])
@pytest.mark.sockets
def test_httpx_pool_closes_a_finished_connection_once_it_holds_more_than_the_keepalive_count(
    keepalive: int, kept: int
) -> None:
    # docs/connection-pool.md and the README's benchmark notes: httpcore 1.0.9 compares *all* its
    # connections, not the idle ones, with max_keepalive_connections (encode/httpcore#1035). A
    # proxy holding more streams than that count closes each upstream connection as its stream
    # ends (one idle connection is within a keep-alive count of 2, yet it is closed), and every
    # new stream opens a new TCP connection. With a count above the streams it is kept.
    body = {"model": "m", "stream": True, "mock": {"ttft_ms": 0, "tps": 50, "tokens": 50}}
    with serve(create_app(), name="pinned-pool-mock") as mock:

        async def connections_before_and_after_one_of_five_streams_ends() -> tuple[int, int]:
            limits = httpx.Limits(max_connections=10, max_keepalive_connections=keepalive)
            async with httpx.AsyncClient(base_url=mock.url, limits=limits) as client:
                request = client.build_request("POST", "/v1/chat/completions", json=body)
                responses = [await client.send(request, stream=True) for _ in range(5)]
                pool = client._transport._pool  # type: ignore[attr-defined]
                before = len(pool.connections)
                await responses[0].aread()  # the first stream ends: its connection is idle
                await responses[0].aclose()
                after = len(pool.connections)
                for response in responses[1:]:
                    await response.aclose()
                return before, after

        counts = asyncio.run(connections_before_and_after_one_of_five_streams_ends())
    assert counts == (5, kept)


@pytest.mark.sockets
def test_httpx_pool_hands_one_idle_connection_to_every_request_waiting_for_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/known-limits.md, "httpx's pool makes streams wait for seconds under churn": httpcore
    # 1.0.9 assigns an idle connection to every request queued in one pass of its pool, and the
    # connection stays idle until the first of them sends on it, so each of the others gets
    # ConnectionNotAvailable and passes over the whole pool again. At 100 steady streams that
    # storm held new streams for 3 to 7 s before any byte went upstream (docs/measurements.md,
    # "The relay's floor on its own libraries, and the pool's storm"). httpcore2 (httpx2) keeps
    # an assigned idle connection for its request; when this fails after an upgrade, the
    # reference's pool no longer storms: measure the relay again.
    from httpcore._async.connection_pool import AsyncPoolRequest

    retries: list[object] = []
    clear = AsyncPoolRequest.clear_connection

    def counted(self: AsyncPoolRequest) -> None:
        retries.append(self)
        clear(self)

    monkeypatch.setattr(AsyncPoolRequest, "clear_connection", counted)
    body = {"model": "m", "stream": True, "mock": {"ttft_ms": 0, "tps": 1000, "tokens": 2}}
    with serve(create_app(), name="pinned-pool-storm-mock") as mock:

        async def four_requests_beside_one_idle_connection() -> int:
            async with httpx.AsyncClient(base_url=mock.url) as client:
                request = client.build_request("POST", "/v1/chat/completions", json=body)
                first = await client.send(request, stream=True)
                await first.aread()  # its connection is idle in the pool now
                await first.aclose()
                responses = await asyncio.gather(
                    *(client.send(request, stream=True) for _ in range(4))
                )
                open_now = len(client._transport._pool.connections)  # type: ignore[attr-defined]
                for response in responses:
                    await response.aclose()
                return open_now

        connections = asyncio.run(four_requests_beside_one_idle_connection())
    assert connections == 4  # the idle one and three new: every request got one in the end
    assert len(retries) >= 1, "no request was sent back to the pool: the storm is gone"
