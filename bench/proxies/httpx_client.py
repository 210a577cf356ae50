"""The portable reference relay over httpx, one app per pool setting.

* ``app``: the reference's own settings (default limits: 100 connections, 20 kept alive). A
  control: it should measure like ``labkit.reference.proxy``, which tells the relay's cost
  apart from the client's.
* ``app_pool``: ``max_connections=None``, 500 kept alive (the "just raise the limits" fix).
* ``app_wide``: ``max_connections=1000``, 100 kept alive (no wall at 100 streams, a pool no
  larger than the default's working set).

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_client:app_pool``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
from fastapi import FastAPI, Request

from bench.proxies.httpx_like import HttpxUpstream
from labkit.reference.portable import make_app, upstream_url
from labkit.reference.proxy import TIMEOUT


def lifespan_with(
    limits: httpx.Limits,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with httpx.AsyncClient(
            base_url=upstream_url(), timeout=TIMEOUT, limits=limits
        ) as client:
            app.state.upstream = HttpxUpstream(client, (httpx.HTTPError,))
            yield

    return lifespan


def upstream_of(request: Request) -> HttpxUpstream:
    upstream: HttpxUpstream = request.app.state.upstream
    return upstream


app = make_app(lifespan_with(httpx.Limits()), upstream_of)
app_pool = make_app(
    lifespan_with(httpx.Limits(max_connections=None, max_keepalive_connections=500)), upstream_of
)
app_wide = make_app(
    lifespan_with(httpx.Limits(max_connections=1000, max_keepalive_connections=100)), upstream_of
)
