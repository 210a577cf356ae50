"""The reference proxy over httpx2 (the client inside openai 3.x and anthropic 2.x).

httpx2 has httpx's API but exceptions of its own, so the adapter here only re-raises httpx2's
``HTTPError`` as the ``httpx.HTTPError`` the relay handles.

* ``app``: httpx2's default limits (100 connections);
* ``app_wide``: ``max_connections=None``, 100 kept alive.

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx2_client:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
from fastapi import FastAPI

from solutions.client_seam import proxy_app, transport_error
from solutions.proxy import UPSTREAM_IDLE_S

TIMEOUT = httpx2.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)


class Httpx2Response:
    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.status_code = response.status_code
        self.headers = response.headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx2.HTTPError as exc:
            raise transport_error(exc) from exc

    async def aread(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx2.HTTPError as exc:
            raise transport_error(exc) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class Httpx2Client:
    def __init__(self, client: httpx2.AsyncClient) -> None:
        self._client = client

    def build_request(
        self, method: str, url: str, *, json: Any = None, headers: Any = None
    ) -> httpx2.Request:
        return self._client.build_request(method, url, json=json, headers=headers)

    async def send(self, request: httpx2.Request, *, stream: bool = False) -> Httpx2Response:
        try:
            return Httpx2Response(await self._client.send(request, stream=stream))
        except httpx2.HTTPError as exc:
            raise transport_error(exc) from exc


def client_with(
    limits: httpx2.Limits,
) -> Callable[[str], AbstractAsyncContextManager[Httpx2Client]]:
    @asynccontextmanager
    async def open_client(base_url: str) -> AsyncIterator[Httpx2Client]:
        async with httpx2.AsyncClient(base_url=base_url, timeout=TIMEOUT, limits=limits) as client:
            yield Httpx2Client(client)

    return open_client


def app_with(limits: httpx2.Limits) -> FastAPI:
    return proxy_app(client_with(limits), title="reference streaming proxy (httpx2)")


app = app_with(httpx2.Limits())
app_wide = app_with(httpx2.Limits(max_connections=None, max_keepalive_connections=100))
