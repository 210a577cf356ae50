"""The relay over httpx with the pool limits lifted: ``max_connections=None``, 500 keep-alive.

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_pool:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request

from bench.proxies.httpx_like import HttpxUpstream
from bench.proxies.relay import UPSTREAM_IDLE_S, make_app, upstream_url

LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=500)
TIMEOUT = httpx.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with httpx.AsyncClient(base_url=upstream_url(), timeout=TIMEOUT, limits=LIMITS) as c:
        app.state.upstream = HttpxUpstream(c, (httpx.HTTPError,))
        yield


def upstream_of(request: Request) -> HttpxUpstream:
    return request.app.state.upstream  # type: ignore[no-any-return]


app = make_app(lifespan, upstream_of)

app_lean = make_app(lifespan, upstream_of, lean=True)
