"""The relay over httpx with the reference's own settings (default pool limits).

``app`` is the reference's behaviour through :mod:`bench.proxies.relay` (a control: it should
measure like the reference); ``app_lean`` is the same with :func:`~bench.proxies.relay.relay_lean`,
which isolates what the relay's per-chunk work costs from what the client costs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request

from bench.proxies.httpx_like import HttpxUpstream
from bench.proxies.relay import UPSTREAM_IDLE_S, make_app, upstream_url

TIMEOUT = httpx.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with httpx.AsyncClient(base_url=upstream_url(), timeout=TIMEOUT) as client:
        app.state.upstream = HttpxUpstream(client, (httpx.HTTPError,))
        yield


def upstream_of(request: Request) -> HttpxUpstream:
    return request.app.state.upstream  # type: ignore[no-any-return]


app = make_app(lifespan, upstream_of)
app_lean = make_app(lifespan, upstream_of, lean=True)
