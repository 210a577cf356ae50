"""The portable reference relay over httpx, one app per pool setting.

* ``app``: the reference's own settings (default limits: 100 connections, 20 kept alive). A
  control: it should measure like ``solutions.proxy``, which tells the relay's cost
  apart from the client's.
* ``app_pool``: ``max_connections=None``, 500 kept alive (the "just raise the limits" fix).
* ``app_wide``: ``max_connections=1000``, 100 kept alive (no wall at 100 streams, a pool no
  larger than the default's working set).

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_client:app_pool``.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from bench.proxies.httpx_like import httpx_like_app
from solutions.proxy import upstream_timeout


def app_with(limits: httpx.Limits) -> FastAPI:
    return httpx_like_app(
        lambda url: httpx.AsyncClient(base_url=url, timeout=upstream_timeout(), limits=limits),
        (httpx.HTTPError,),
    )


app = app_with(httpx.Limits())
app_pool = app_with(httpx.Limits(max_connections=None, max_keepalive_connections=500))
app_wide = app_with(httpx.Limits(max_connections=1000, max_keepalive_connections=100))
