"""The portable reference relay over httpx2 (the client inside openai 3.x and anthropic 2.x).

* ``app``: httpx2's default limits (100 connections);
* ``app_wide``: ``max_connections=None``, 100 kept alive.

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx2_client:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx2
from fastapi import FastAPI, Request

from bench.proxies.httpx_like import HttpxUpstream
from labkit.reference.portable import UPSTREAM_IDLE_S, make_app, upstream_url

TIMEOUT = httpx2.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)


def lifespan_with(
    limits: httpx2.Limits,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with httpx2.AsyncClient(
            base_url=upstream_url(), timeout=TIMEOUT, limits=limits
        ) as client:
            app.state.upstream = HttpxUpstream(client, (httpx2.HTTPError,))
            yield

    return lifespan


def upstream_of(request: Request) -> HttpxUpstream:
    upstream: HttpxUpstream = request.app.state.upstream
    return upstream


app = make_app(lifespan_with(httpx2.Limits()), upstream_of)
app_wide = make_app(
    lifespan_with(httpx2.Limits(max_connections=None, max_keepalive_connections=100)),
    upstream_of,
)
