"""The reference relay on ``httpx.AsyncClient`` whose transport is aiohttp's (``httpx-aiohttp``).

The relay's code is the reference's, httpx API and all; only the bytes go over aiohttp's
connector instead of httpcore's pool. Run:
``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_over_aiohttp:app``.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from httpx_aiohttp import AiohttpTransport

from solutions.client_seam import proxy_app
from solutions.proxy import UPSTREAM_CONNECTIONS, upstream_timeout


def open_client(base_url: str) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=UPSTREAM_CONNECTIONS, max_keepalive_connections=UPSTREAM_CONNECTIONS
    )
    transport = AiohttpTransport(limits=limits)
    return httpx.AsyncClient(base_url=base_url, timeout=upstream_timeout(), transport=transport)


app: FastAPI = proxy_app(open_client, title="reference streaming proxy (httpx over aiohttp)")
