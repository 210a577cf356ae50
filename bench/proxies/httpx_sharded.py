"""The reference proxy over one httpx client whose connection pool is split in ``SHARDS``.

httpcore 1.0's pool walks every connection it holds at the start and at the end of each
request (``_assign_requests_to_connections``), so its cost grows with the streams open. Here
the one shared client sends each request through one of ``SHARDS`` pools, in turn, so each walk
sees about a ``SHARDS``-th of the connections. It tests how much of the reference's CPU per
event that walk is (a small share: docs/measurements.md, "Three timed checks on a loaded
machine, and a split pool"). Run:
``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_sharded:app``.
"""

from __future__ import annotations

import itertools

import httpx
from fastapi import FastAPI

from solutions.client_seam import proxy_app
from solutions.proxy import UPSTREAM_CONNECTIONS, upstream_timeout

SHARDS = 8


class ShardedTransport(httpx.AsyncBaseTransport):
    """``shards`` httpx transports, each with its share of the limits, taken in turn."""

    def __init__(self, shards: int, connections: int) -> None:
        each = max(1, connections // shards)
        limits = httpx.Limits(max_connections=each, max_keepalive_connections=each)
        self._pools = [httpx.AsyncHTTPTransport(limits=limits) for _ in range(shards)]
        self._turn = itertools.cycle(self._pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await next(self._turn).handle_async_request(request)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


def open_client(base_url: str) -> httpx.AsyncClient:
    transport = ShardedTransport(SHARDS, UPSTREAM_CONNECTIONS)
    return httpx.AsyncClient(base_url=base_url, timeout=upstream_timeout(), transport=transport)


app: FastAPI = proxy_app(open_client, title="reference streaming proxy (httpx, sharded pool)")
