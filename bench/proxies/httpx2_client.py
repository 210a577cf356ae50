"""The portable reference relay over httpx2 (the client inside openai 3.x and anthropic 2.x).

* ``app``: httpx2's default limits (100 connections);
* ``app_wide``: ``max_connections=None``, 100 kept alive.

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx2_client:app``.
"""

from __future__ import annotations

import httpx2
from fastapi import FastAPI

from bench.proxies.httpx_like import httpx_like_app
from solutions.portable import UPSTREAM_IDLE_S

TIMEOUT = httpx2.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)


def app_with(limits: httpx2.Limits) -> FastAPI:
    return httpx_like_app(
        lambda url: httpx2.AsyncClient(base_url=url, timeout=TIMEOUT, limits=limits),
        (httpx2.HTTPError,),
    )


app = app_with(httpx2.Limits())
app_wide = app_with(httpx2.Limits(max_connections=None, max_keepalive_connections=100))
