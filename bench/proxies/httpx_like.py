"""The :class:`~labkit.reference.portable.Upstream` adapter for httpx and httpx2 (same API)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from labkit.reference.portable import CHAT


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
