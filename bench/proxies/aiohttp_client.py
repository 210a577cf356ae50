"""The relay over aiohttp: an unlimited connector (aiohttp's default caps it at 100) and no
total timeout (aiohttp's default ends any request after 300 s), only an idle read deadline.

Run: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.aiohttp_client:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from fastapi import FastAPI, Request

from bench.proxies.relay import UPSTREAM_IDLE_S, make_app, upstream_url

TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=UPSTREAM_IDLE_S)


class AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def lines(self) -> AsyncIterator[str]:
        async for raw in self.response.content:
            yield raw.decode().rstrip("\r\n")

    async def read(self) -> bytes:
        return await self.response.read()

    async def close(self) -> None:
        self.response.close()


class AiohttpUpstream:
    errors: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError)

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> AiohttpResponse:
        response = await self.session.post("/v1/chat/completions", json=body, headers=headers)
        return AiohttpResponse(response)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(upstream_url(), connector=connector, timeout=TIMEOUT) as s:
        app.state.upstream = AiohttpUpstream(s)
        yield


def upstream_of(request: Request) -> AiohttpUpstream:
    return request.app.state.upstream  # type: ignore[no-any-return]


app = make_app(lifespan, upstream_of)

app_lean = make_app(lifespan, upstream_of, lean=True)
