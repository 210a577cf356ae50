"""The reference proxy over aiohttp: the one to deploy when a proxy must hold many streams.

It is ``solutions/proxy.py`` itself, route and relay, with aiohttp in place of httpx
(:func:`solutions.client_seam.proxy_app`): :class:`AiohttpClient` speaks the little of httpx's
API that the relay uses and raises aiohttp's transport failures as ``httpx.HTTPError``. The
client was chosen by measurement (``make bench``, README "Benchmarks"): with httpx's default
pool the reference holds 100 upstream streams, and lifting httpx's limit makes every request
slower, while aiohttp held as many streams as the direct path on the same machine at about half
the CPU per chunk.

Two of aiohttp's defaults would break a streaming proxy and are overridden here:

* ``TCPConnector(limit=100)``: the 101st concurrent stream waits for a connection. ``limit=0``
  removes the cap (the operating system's file descriptors are the limit).
* ``ClientTimeout(total=300)``: every request, however busy its stream, ends after 5 minutes.
  Here there is no total, a 5 s connect deadline and ``UPSTREAM_IDLE_S`` between two reads.

A line of the upstream's body longer than 128 KiB (aiohttp's read buffer) ends the stream with
an in-stream error; OpenAI-style chunks are far smaller.

Run it: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn solutions.aiohttp_proxy:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from solutions.client_seam import proxy_app, transport_error
from solutions.proxy import UPSTREAM_IDLE_S

TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=UPSTREAM_IDLE_S)
# What aiohttp raises when the transport fails (a read past ``sock_read`` is a TimeoutError).
ERRORS = (aiohttp.ClientError, TimeoutError)


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    json: Any
    headers: Any


class AiohttpResponse:
    """An ``aiohttp.ClientResponse`` as the relay reads an ``httpx.Response``."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers = response.headers  # case-insensitive, like httpx's

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():  # as they arrive
                yield chunk
        except ERRORS as exc:
            raise transport_error(exc) from exc

    async def aread(self) -> bytes:
        try:
            return await self._response.read()
        except ERRORS as exc:
            raise transport_error(exc) from exc

    async def aclose(self) -> None:
        # After the body's end aiohttp has already put the connection back in its pool and this
        # does nothing; before it, this closes the connection, which stops the generation.
        self._response.close()


class AiohttpClient:
    """An ``aiohttp.ClientSession`` on one base URL, as the relay uses an ``httpx.AsyncClient``."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self._session = session
        self._base_url = base_url

    def build_request(
        self, method: str, url: str, *, json: Any = None, headers: Any = None
    ) -> Request:
        return Request(method, self._base_url + url, json, headers)

    async def send(self, request: Request, *, stream: bool = False) -> AiohttpResponse:
        # aiohttp always streams: the body is read only when the relay asks for it.
        try:
            response = await self._session.request(
                request.method, request.url, json=request.json, headers=request.headers
            )
        except ERRORS as exc:
            raise transport_error(exc) from exc
        return AiohttpResponse(response)


@asynccontextmanager
async def aiohttp_client(base_url: str) -> AsyncIterator[AiohttpClient]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        yield AiohttpClient(session, base_url)


app = proxy_app(aiohttp_client, title="reference streaming proxy (aiohttp)")
