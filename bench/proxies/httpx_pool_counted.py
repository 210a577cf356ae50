"""The reference proxy over httpx, with httpcore's connection pool counted: every second, how
many passes the pool made over its connections (``_assign_requests_to_connections``), the
CPU they took, and how many requests it sent back to queue after a connection it had assigned
them turned out to be taken (``ConnectionNotAvailable``, counted at ``clear_connection``).

It patches two private methods of httpcore 1.0.9's pool, for measuring only. One JSON line a
second goes to ``$POOL_COUNTS`` (default ``pool-counts.jsonl`` in the working folder). It is how
docs/measurements.md ("The relay's floor on its own libraries, and the pool's storm") found
why some rounds of ``python -m bench relay`` held new streams for seconds. Run:
``UPSTREAM_URL=http://127.0.0.1:8001 POOL_COUNTS=/tmp/counts.jsonl uvicorn
bench.proxies.httpx_pool_counted:app``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from httpcore._async.connection_pool import AsyncConnectionPool, AsyncPoolRequest

from solutions.client_seam import UpstreamClient, proxy_app
from solutions.proxy import make_client

_counts: dict[str, float] = {"passes": 0, "pass_cpu_s": 0.0, "sent_back": 0}
_assign = AsyncConnectionPool._assign_requests_to_connections
_clear = AsyncPoolRequest.clear_connection


def _counted_assign(pool: AsyncConnectionPool) -> Any:
    started = time.process_time()
    closing = _assign(pool)
    _counts["passes"] += 1
    _counts["pass_cpu_s"] += time.process_time() - started
    return closing


def _counted_clear(request: AsyncPoolRequest) -> None:
    _counts["sent_back"] += 1
    _clear(request)


def _append_and_reset(path: str) -> None:
    line = {"t": round(time.monotonic(), 1), **{k: round(v, 4) for k, v in _counts.items()}}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
    _counts.update(passes=0, pass_cpu_s=0.0, sent_back=0)


async def _write_every_second(path: str) -> None:
    while True:
        await asyncio.sleep(1)
        _append_and_reset(path)


@asynccontextmanager
async def counted_client(upstream_url: str) -> AsyncIterator[UpstreamClient]:
    AsyncConnectionPool._assign_requests_to_connections = _counted_assign  # type: ignore[method-assign]
    AsyncPoolRequest.clear_connection = _counted_clear  # type: ignore[method-assign]
    path = os.environ.get("POOL_COUNTS", "pool-counts.jsonl")
    writer = asyncio.create_task(_write_every_second(path))
    try:
        client: httpx.AsyncClient = make_client(upstream_url)
        async with client:
            yield client
    finally:
        writer.cancel()
        _append_and_reset(path)  # the last part-second too: a run shorter than a tick still counts


app: FastAPI = proxy_app(counted_client, title="reference proxy, httpcore's pool counted")
