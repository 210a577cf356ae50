"""The reference proxy over aiohttp: the one to deploy when a proxy must hold many streams.

Same behaviour as ``solutions/proxy.py`` (it is :mod:`solutions.portable`'s relay,
and the grader's checks pass against it); a different upstream client, chosen by measurement
(``make bench``, README "Benchmarks"): with httpx's default pool the reference holds 100
upstream streams, and lifting httpx's limit makes every request slower, while aiohttp held as
many streams as the direct path on the same machine at about half the CPU per chunk.

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

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from solutions.portable import CHAT, UPSTREAM_IDLE_S, make_app, upstream_url

TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=UPSTREAM_IDLE_S)


class AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def lines(self) -> AsyncIterator[str]:
        async for raw in self.response.content:  # one line per item, up to and with b"\n"
            yield raw.decode().rstrip("\r\n")

    async def read(self) -> bytes:
        return await self.response.read()

    async def close(self) -> None:
        # After the body's end aiohttp has already put the connection back in its pool and this
        # does nothing; before it, this closes the connection, which stops the generation.
        self.response.close()


class AiohttpUpstream:
    errors: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError)

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session = session
        self.url = base_url + CHAT

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> AiohttpResponse:
        return AiohttpResponse(await self.session.post(self.url, json=body, headers=headers))


@asynccontextmanager
async def aiohttp_upstream() -> AsyncIterator[AiohttpUpstream]:
    base_url = upstream_url()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        yield AiohttpUpstream(session, base_url)


app = make_app(aiohttp_upstream, title="reference streaming proxy (aiohttp)")
