"""What the gateway calls of a proxy module: the parts of it the lab has written.

``parts`` is ``solutions.proxy`` or the learner's ``proxy.py`` loaded with
``labkit.load_proxy``. The endpoint serves requests with some of them, the relay bills with
others, and the upstream is read with the rest; none of this module loads a web framework.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx
    from fastapi import Request, Response


class ProxyParts(Protocol):
    """What the gateway calls of a proxy module (``solutions.proxy``, or the learner's
    ``proxy.py`` loaded with ``labkit.load_proxy``): the parts of it the lab has written."""

    SSE_HEADERS: Mapping[str, str]
    Usage: Callable[[], Any]

    def make_client(self, upstream_url: str) -> httpx.AsyncClient: ...
    def sse_lines(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[str]: ...
    def sse_events(self, lines: AsyncIterator[str]) -> AsyncIterator[str]: ...
    def event_data(self, event: str) -> str: ...
    def ask_for_usage(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]: ...
    def log_usage(self, usage: Any, outcome: str) -> None: ...
    def error_body(self, message: str, type_: str) -> dict[str, Any]: ...
    async def read_request(self, request: Request) -> dict[str, Any] | Response: ...
    def upstream_headers(self, request: Request) -> dict[str, str]: ...
