"""The :class:`~solutions.portable.Upstream` adapter for httpx and httpx2 (same API), and
the portable reference relay over a client of either."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from solutions.portable import CHAT, make_app, upstream_url


class HttpxResponse:
    def __init__(self, response: Any) -> None:
        self.response = response
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers

    def lines(self) -> AsyncIterator[str]:
        return self.response.aiter_lines()  # type: ignore[no-any-return]

    async def read(self) -> bytes:
        return await self.response.aread()  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.response.aclose()


class HttpxUpstream:
    """Wraps an ``httpx.AsyncClient`` or ``httpx2.AsyncClient`` built with ``base_url``."""

    def __init__(self, client: Any, errors: tuple[type[BaseException], ...]) -> None:
        self.client = client
        self.errors = errors

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> HttpxResponse:
        request = self.client.build_request("POST", CHAT, json=body, headers=headers)
        return HttpxResponse(await self.client.send(request, stream=True))


def httpx_like_app(
    client_for: Callable[[str], Any], errors: tuple[type[BaseException], ...]
) -> FastAPI:
    """The portable relay over ``client_for(base_url)``, an httpx or httpx2 ``AsyncClient``;
    ``errors`` are that library's ``HTTPError``."""

    @asynccontextmanager
    async def open_upstream() -> AsyncIterator[HttpxUpstream]:
        async with client_for(upstream_url()) as client:
            yield HttpxUpstream(client, errors)

    return make_app(open_upstream)
