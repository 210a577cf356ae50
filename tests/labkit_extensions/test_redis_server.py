"""labkit.servers.redis: a private redis-server on loopback, killed and restarted on its port,
driven by the real redis.asyncio client over real sockets (skipped without redis-server).

The client is set up as docs/redis.md recommends: ``socket_connect_timeout=0.5``, a
``socket_timeout`` (1.5 s) longer than the XREAD BLOCK (1 s), and one immediate retry on a
ConnectionError only (a timeout is not retried), so that a Redis that dies or hangs is an error
within 2 s (measured: a few milliseconds when it dies), and a pooled connection left over from
before a restart is replaced instead of failing a command.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from labkit.errors import PortInUseError
from labkit.servers import start_redis
from labkit.servers.redis import INSTALL_HINT, RedisNotFoundError, RedisServer, find_redis_server

needs_redis = pytest.mark.skipif(
    shutil.which("redis-server") is None and not os.path.exists("/usr/sbin/redis-server"),
    reason="redis-server is not installed (make test installs it as root; or apt-get install "
    "redis-server)",
)

BLOCK_MS = 1000
SOCKET_TIMEOUT = 1.5
#: Within how long a client set up as recommended must raise once Redis is dead or hung.
BOUND_S = 2.0


def _client(url: str, *, retries: int = 1) -> redis.asyncio.Redis:
    return redis.asyncio.from_url(
        url,
        socket_connect_timeout=0.5,
        socket_timeout=SOCKET_TIMEOUT,
        retry=Retry(NoBackoff(), retries, supported_errors=(redis.exceptions.ConnectionError,)),
        decode_responses=True,
    )


async def _until_blocked(url: str) -> None:
    """Return once a client is blocked in Redis (an XREAD BLOCK has reached the server)."""
    probe = _client(url)
    try:
        deadline = time.monotonic() + 5
        while (await probe.info("clients"))["blocked_clients"] < 1:
            assert time.monotonic() < deadline, "the XREAD never blocked"
            await asyncio.sleep(0.005)
    finally:
        await probe.aclose()


async def _elapsed_raising(call: Any) -> tuple[float, BaseException]:
    started = time.monotonic()
    with pytest.raises(redis.exceptions.RedisError) as info:
        await asyncio.wait_for(call, 10)
    return time.monotonic() - started, info.value


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with start_redis(name="test-redis") as handle:
        yield handle


def test_a_missing_redis_server_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr("labkit.servers.redis._SEARCH_PATH", ())
    with pytest.raises(RedisNotFoundError) as info:
        find_redis_server()
    message = str(info.value)
    assert message.startswith("Expected a redis-server executable on PATH or in /usr/sbin")
    assert "`make test` installs it when run as root" in message
    assert "apt-get install redis-server" in message
    assert INSTALL_HINT in message
    with pytest.raises(RedisNotFoundError):
        start_redis(name="test-redis-missing")


@needs_redis
@pytest.mark.sockets
def test_it_answers_ping_at_its_url_keeps_nothing_on_disk_and_stops(server: RedisServer) -> None:
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    assert server.running

    async def check() -> None:
        client = _client(server.url)
        assert await client.ping() is True
        assert await client.config_get("save") == {"save": ""}
        assert await client.config_get("appendonly") == {"appendonly": "no"}
        assert await client.config_get("bind") == {"bind": "127.0.0.1"}
        assert await client.config_get("dir") == {"dir": str(server.workdir)}
        await client.aclose()

    asyncio.run(check())
    server.stop()
    assert not server.running
    assert not server.workdir.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    server.stop()  # safe twice


@needs_redis
@pytest.mark.sockets
def test_xadd_with_maxlen_keeps_only_the_newest_entries(server: RedisServer) -> None:
    async def check() -> None:
        client = _client(server.url)
        for n in range(10):
            await client.xadd("events", {"n": str(n)}, maxlen=3, approximate=False)
        assert await client.xlen("events") == 3
        assert [fields["n"] for _, fields in await client.xrange("events")] == ["7", "8", "9"]
        await client.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_a_blocked_xread_returns_as_soon_as_another_client_appends(server: RedisServer) -> None:
    async def check() -> None:
        reader, writer = _client(server.url), _client(server.url)
        pending = asyncio.ensure_future(reader.xread({"events": "$"}, block=BLOCK_MS))
        await _until_blocked(server.url)
        appended = time.monotonic()
        entry_id = await writer.xadd("events", {"data": "hello"})
        got = await pending
        assert time.monotonic() - appended < 0.5
        assert got == [["events", [(entry_id, {"data": "hello"})]]]
        await reader.aclose()
        await writer.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_killing_it_fails_a_blocked_xread_and_the_next_command_at_once(
    server: RedisServer,
) -> None:
    async def check() -> None:
        client = _client(server.url)
        pending = asyncio.ensure_future(client.xread({"events": "$"}, block=BLOCK_MS))
        await _until_blocked(server.url)
        server.kill()
        assert not server.running
        waited, error = await _elapsed_raising(pending)
        assert isinstance(error, redis.exceptions.ConnectionError), repr(error)
        assert waited < BOUND_S / 2  # measured: about 2 ms (docs/redis.md)
        for fresh in (client, _client(server.url)):  # the same client, and a new one
            waited, error = await _elapsed_raising(fresh.ping())
            assert isinstance(error, redis.exceptions.ConnectionError), repr(error)
            assert "Connect call failed" in str(error) or "refused" in str(error).lower()
            assert waited < BOUND_S / 2
            await fresh.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_a_hung_redis_fails_a_blocked_xread_with_a_timeout_within_the_bound(
    server: RedisServer,
) -> None:
    """SIGSTOP: the port stays open and nothing answers, as when Redis hangs or the network
    drops its packets. The socket timeout ends the read, as a TimeoutError, not a
    ConnectionError: a proxy catches both (redis.exceptions.RedisError)."""
    assert server.pid is not None

    async def check() -> None:
        client = _client(server.url)
        pending = asyncio.ensure_future(client.xread({"events": "$"}, block=BLOCK_MS))
        await _until_blocked(server.url)
        os.kill(server.pid or 0, signal.SIGSTOP)
        try:
            waited, error = await _elapsed_raising(pending)
        finally:
            os.kill(server.pid or 0, signal.SIGCONT)
        assert isinstance(error, redis.exceptions.TimeoutError), repr(error)
        assert SOCKET_TIMEOUT - 0.6 < waited < BOUND_S
        await client.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_after_a_restart_on_the_same_port_a_client_recovers_on_its_next_command(
    server: RedisServer,
) -> None:
    url, port = server.url, server.port

    async def check() -> None:
        client = _client(url)
        idle = _client(url)  # a pooled connection to the old server, left idle
        await client.xadd("events", {"data": "before"})
        await idle.ping()
        server.kill()
        with pytest.raises(redis.exceptions.ConnectionError):
            await client.xlen("events")
        server.restart()
        assert (server.port, server.url, server.running, server.starts) == (port, url, True, 2)
        assert await client.xlen("events") == 0  # the same client, on its next command: empty
        assert await idle.ping() is True  # the idle pooled connection is replaced, not used
        await client.xadd("events", {"data": "after"})
        assert await client.xlen("events") == 1
        await client.aclose()
        await idle.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_without_a_retry_an_idle_pooled_connection_fails_once_after_a_restart(
    server: RedisServer,
) -> None:
    """Why the recommended client retries a ConnectionError once: redis-py 8.1's pool hands out
    a connection the old server closed without noticing, and the command on it fails."""

    async def check() -> None:
        idle = _client(server.url, retries=0)
        await idle.ping()
        server.restart()
        with pytest.raises(redis.exceptions.ConnectionError, match="closed by server"):
            await idle.ping()
        assert await idle.ping() is True  # that connection was dropped: the next one is new
        await idle.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_cancelling_a_blocked_xread_drops_its_connection_and_the_pool_serves_on(
    server: RedisServer,
) -> None:
    async def check() -> None:
        client, probe = _client(server.url), _client(server.url)
        await client.ping()
        connected = (await probe.info("clients"))["connected_clients"]
        task = asyncio.ensure_future(client.xread({"events": "$"}, block=0))
        await _until_blocked(server.url)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        pool: Any = client.connection_pool
        assert (len(pool._in_use_connections), len(pool._available_connections)) == (0, 1)
        assert not pool._available_connections[0].is_connected
        deadline = time.monotonic() + 2
        while (info := await probe.info("clients"))["connected_clients"] >= connected:
            assert time.monotonic() < deadline, info
            await asyncio.sleep(0.01)
        assert info["blocked_clients"] == 0
        entry_id = await probe.xadd("events", {"data": "next"})
        assert await client.xread({"events": "0"}) == [["events", [(entry_id, {"data": "next"})]]]
        await client.aclose()
        await probe.aclose()

    asyncio.run(check())


@needs_redis
@pytest.mark.sockets
def test_restart_raises_port_in_use_when_another_process_took_its_port(
    server: RedisServer,
) -> None:
    server.kill()
    squatter = socket.create_server(("127.0.0.1", server.port))
    try:
        with pytest.raises(PortInUseError) as info:
            server.restart()
        assert f"127.0.0.1:{server.port}: the port is already in use" in str(info.value)
        assert not server.running
    finally:
        squatter.close()
    server.restart()  # the port is free again
    assert server.running
