"""The relay over httpx2 (the client inside openai 3.x and anthropic 2.x), default limits.

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx2_client:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from fastapi import FastAPI, Request

from bench.proxies.httpx_like import HttpxUpstream
from bench.proxies.relay import UPSTREAM_IDLE_S, make_app, upstream_url

TIMEOUT = httpx2.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with httpx2.AsyncClient(base_url=upstream_url(), timeout=TIMEOUT) as client:
        app.state.upstream = HttpxUpstream(client, (httpx2.HTTPError,))
        yield


def upstream_of(request: Request) -> HttpxUpstream:
    return request.app.state.upstream  # type: ignore[no-any-return]


app = make_app(lifespan, upstream_of)

app_lean = make_app(lifespan, upstream_of, lean=True)

# The pool limit lifted: httpx2's default (100 connections) caps the streams a proxy can hold.
WIDE = httpx2.Limits(max_connections=None, max_keepalive_connections=100)


@asynccontextmanager
async def lifespan_wide(app: FastAPI) -> AsyncIterator[None]:
    async with httpx2.AsyncClient(base_url=upstream_url(), timeout=TIMEOUT, limits=WIDE) as c:
        app.state.upstream = HttpxUpstream(c, (httpx2.HTTPError,))
        yield


app_lean_wide = make_app(lifespan_wide, upstream_of, lean=True)
