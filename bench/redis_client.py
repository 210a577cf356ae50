"""``python -m bench.redis_client``: how soon a redis.asyncio client notices a Redis that died or
hangs, and what a stream's events cost in Redis memory. The numbers of docs/redis.md.

Each client configuration meets two faults of a private redis-server (``labkit.servers.redis``):
*killed* (SIGKILL: connections reset, the port refuses) and *frozen* (SIGSTOP: the process keeps
its port, the kernel still completes TCP handshakes, nothing answers; what a hung or
unreachable Redis looks like to a client). For each, the time until a pending ``XREAD BLOCK``
raises, and until a new command (PING, on a fresh client) raises, with the connection attempts
made meanwhile; then, after ``restart()``, the first command of that client and of a client
whose pooled connection stayed idle through the fault. A case still waiting after
``--give-up`` seconds is reported as such and cancelled.

    python -m bench.redis_client                 all of it (several minutes: the defaults wait)
    python -m bench.redis_client --only memory   the memory part alone
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio import connection as aconnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from labkit.servers.redis import RedisServer, redis_version, start_redis

STREAM = "stream"


@dataclass(frozen=True)
class Config:
    name: str
    make: Callable[[str, int], aredis.Redis]  # host, port
    block_ms: int


def _url(host: str, port: int) -> str:
    return f"redis://{host}:{port}/0"


def _tight(retry: Retry) -> Callable[[str, int], aredis.Redis]:
    return lambda host, port: aredis.from_url(
        _url(host, port), socket_connect_timeout=0.5, socket_timeout=1.5, retry=retry
    )


CONFIGS = [
    Config("Redis(host=, port=) defaults", lambda h, p: aredis.Redis(host=h, port=p), 5000),
    Config("from_url(url) defaults", lambda h, p: aredis.from_url(_url(h, p)), 5000),
    Config(
        "from_url(url, socket_connect_timeout=0.5, socket_timeout=1.5, "
        "retry=Retry(NoBackoff(), 0)), XREAD BLOCK 1000",
        _tight(Retry(NoBackoff(), 0)),
        1000,
    ),
    Config(
        "recommended: from_url(url, socket_connect_timeout=0.5, socket_timeout=1.5, "
        "retry=Retry(NoBackoff(), 1, supported_errors=(ConnectionError,))), XREAD BLOCK 1000",
        _tight(Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,))),
        1000,
    ),
]

_connects = 0
_real_connect = aconnection.Connection._connect


async def _counted_connect(self: aconnection.Connection) -> None:
    global _connects
    _connects += 1
    await _real_connect(self)


async def _timed(call: Awaitable[Any], give_up: float) -> str:
    """How ``call`` ended and after how long, with the connection attempts it made."""
    global _connects
    _connects = 0
    started = time.monotonic()
    try:
        await asyncio.wait_for(call, give_up)
        how = "returned"
    except TimeoutError:
        how = f"still waiting after {give_up:.0f} s (given up)"
    except redis.RedisError as exc:
        how = f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:60]}"
    return f"{time.monotonic() - started:7.3f} s, {_connects:3d} connects: {how}"


async def _until_blocked(server: RedisServer, clients: int = 1) -> None:
    probe = aredis.from_url(server.url)
    try:
        for _ in range(1000):
            if (await probe.info("clients"))["blocked_clients"] >= clients:
                return
            await asyncio.sleep(0.005)
        raise RuntimeError("the XREAD never reached Redis")
    finally:
        await probe.aclose()


async def fault(server: RedisServer, config: Config, kind: str, give_up: float) -> list[str]:
    client, idle = config.make(server.host, server.port), config.make(server.host, server.port)
    await client.ping()
    await idle.ping()  # a pooled connection, idle through the fault
    pending = asyncio.ensure_future(client.xread({STREAM: "$"}, block=config.block_ms))
    await _until_blocked(server)
    assert server.process is not None
    if kind == "killed":
        server.kill()
    else:
        os.kill(server.process.pid, signal.SIGSTOP)
    lines = [f"  {kind}: pending XREAD BLOCK {config.block_ms}: {await _timed(pending, give_up)}"]
    fresh = config.make(server.host, server.port)
    lines.append(f"  {kind}: new PING:                {await _timed(fresh.ping(), give_up)}")
    if kind == "frozen":
        os.kill(server.process.pid, signal.SIGCONT)
    server.restart()
    lines.append(f"  {kind}: after restart, PING:     {await _timed(client.ping(), give_up)}")
    lines.append(f"  {kind}: ... on the idle client: {await _timed(idle.ping(), give_up)}")
    await client.aclose()
    await idle.aclose()
    await fresh.aclose()
    return lines


async def unreachable(give_up: float) -> list[str]:
    """A new PING to a port whose accept queue is full: the kernel drops the SYNs, as a
    firewall or a lost host would, so the TCP connect itself waits."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    host, port = listener.getsockname()
    fillers = [socket.socket() for _ in range(3)]
    for filler in fillers:
        filler.setblocking(False)
        filler.connect_ex((host, port))
    await asyncio.sleep(0.2)
    lines = []
    for config in CONFIGS:
        client = config.make(host, port)
        lines.append(f"  {config.name}:\n    new PING: {await _timed(client.ping(), give_up)}")
        await client.aclose()
    for sock in [*fillers, listener]:
        sock.close()
    return lines


async def block_longer_than_timeout(server: RedisServer, give_up: float) -> list[str]:
    """A healthy Redis, no writer: an XREAD BLOCK as long as, or longer than, socket_timeout."""
    lines = []
    for config, block_ms in [(CONFIGS[1], 5000), (CONFIGS[1], 10000), (CONFIGS[0], 10000)]:
        client = config.make(server.host, server.port)
        call = client.xread({STREAM: "$"}, block=block_ms)
        lines.append(f"  {config.name}, XREAD BLOCK {block_ms}: {await _timed(call, give_up)}")
        await client.aclose()
    return lines


async def cancelled_xread(server: RedisServer) -> list[str]:
    """A task blocked in XREAD BLOCK 0 (forever), cancelled: the connection is dropped, not
    handed back with a reply still due, and the pool serves the next command."""
    client = aredis.from_url(server.url)
    probe = aredis.from_url(server.url)
    await client.ping()
    before = (await probe.info("clients"))["connected_clients"]
    task = asyncio.ensure_future(client.xread({STREAM: "$"}, block=0))
    await _until_blocked(server)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0.05)
    info = await probe.info("clients")
    pool: Any = client.connection_pool
    lines = [
        f"  connected_clients before/after: {before}/{info['connected_clients']}, "
        f"blocked_clients after: {info['blocked_clients']}",
        f"  pool: in use {len(pool._in_use_connections)}, idle {len(pool._available_connections)}"
        f" (connected: {[c.is_connected for c in pool._available_connections]})",
    ]
    await probe.xadd(STREAM, {"data": "after"})
    got = await client.xread({STREAM: "0"}, count=1)
    lines.append(f"  the next XREAD on the same client: {got!r:.80}")
    await client.aclose()
    await probe.aclose()
    return lines


async def memory(server: RedisServer) -> list[str]:
    """A stream of 200 entries with one 150-byte field each, then 1,000 such streams."""
    client = aredis.from_url(server.url)
    await client.flushall()
    base = (await client.info("memory"))["used_memory"]
    payload = "x" * 150
    for key in range(1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(200):
            pipe.xadd(f"stream:{key}", {"data": payload}, maxlen=1000, approximate=True)
        await pipe.execute()
    one = await client.memory_usage("stream:0", samples=0)
    used = (await client.info("memory"))["used_memory"]
    config = await client.config_get("stream-node-max-*")
    await client.aclose()
    return [
        f"  {config}",
        f"  MEMORY USAGE of one stream (200 entries, 'data' field of 150 bytes): {one} bytes",
        f"  used_memory: {base} empty, {used} with 1,000 such streams: "
        f"{(used - base) / 1000:.0f} bytes a stream, {(used - base) / 2**20:.1f} MiB in all",
    ]


async def main(only: str | None, give_up: float, repeat: int) -> None:
    aconnection.Connection._connect = _counted_connect  # type: ignore[method-assign]
    print(f"redis-server {redis_version()}, redis-py {redis.__version__}")
    with start_redis(name="bench-redis") as server:
        if only in (None, "faults"):
            for config in CONFIGS:
                print(config.name)
                for kind in ["killed"] * repeat + ["frozen"]:
                    for line in await fault(server, config, kind, give_up):
                        print(line, flush=True)
        if only in (None, "unreachable"):
            print("unreachable: a port whose accept queue is full (SYNs dropped)")
            print("\n".join(await unreachable(give_up)))
        if only in (None, "block"):
            print("an XREAD BLOCK against socket_timeout (5 s by default), on a healthy Redis")
            print("\n".join(await block_longer_than_timeout(server, give_up)))
        if only in (None, "cancel"):
            print("cancelling a task blocked in XREAD BLOCK 0")
            print("\n".join(await cancelled_xread(server)))
        if only in (None, "memory"):
            print("memory")
            print("\n".join(await memory(server)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.redis_client")
    parser.add_argument("--only", choices=["faults", "unreachable", "block", "cancel", "memory"])
    parser.add_argument("--give-up", type=float, default=150.0, metavar="SECONDS")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the killed case")
    args = parser.parse_args()
    asyncio.run(main(args.only, args.give_up, args.repeat))
