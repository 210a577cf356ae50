"""The reference proxy over httpx with other pool settings, one app per setting.

* ``app_pool``: ``max_connections=None``, 500 kept alive (the "just raise the limits" fix).
* ``app_wide``: ``max_connections=1000``, 100 kept alive (no wall at 100 streams, a pool no
  larger than the default's working set).

The reference itself (``solutions.proxy``) has httpx's default limits. Run:
``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_client:app_pool``.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from fastapi import FastAPI

from solutions.client_seam import proxy_app
from solutions.proxy import upstream_timeout


def client_with(limits: httpx.Limits) -> Callable[[str], httpx.AsyncClient]:
    def open_client(base_url: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base_url, timeout=upstream_timeout(), limits=limits)

    return open_client


def app_with(limits: httpx.Limits) -> FastAPI:
    return proxy_app(client_with(limits), title="reference streaming proxy (httpx, other limits)")


app_pool = app_with(httpx.Limits(max_connections=None, max_keepalive_connections=500))
app_wide = app_with(httpx.Limits(max_connections=1000, max_keepalive_connections=100))
