"""``solutions/proxy.py``'s route and relay, served over an upstream client of the caller's choice.

There is one relay: the one the notebooks build, in ``solutions/proxy.py``. Its route and body
use this much of ``httpx.AsyncClient`` and ``httpx.Response``, and nothing else:

* ``client.build_request("POST", path, json=..., headers=...)``, then
  ``await client.send(request, stream=True)``;
* ``response.status_code``, ``response.headers.get(name[, default])``,
  ``response.aiter_bytes()``, ``await response.aread()``, ``await response.aclose()``;
* a failure of the transport is an ``httpx.HTTPError``.

:class:`UpstreamClient` and :class:`UpstreamResponse` write that down. An httpx client with
other pool limits already is one; another library (``solutions/aiohttp_proxy.py``,
``bench/proxies/httpx2_client.py``) gets an adapter of a few lines that re-raises its transport
failures with :func:`transport_error`. :func:`proxy_app` then serves ``solutions/proxy.py``'s own
``chat_completions`` over that client, so every variant has the reference's behaviour by
construction, and the httpx code that learners read stays what it is.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import httpx
from fastapi import FastAPI

from solutions.proxy import (
    CHAT_PATH,
    STREAMS_PATH,
    chat_completions,
    make_log,
    resume_stream,
    stop_stream,
)

__all__ = [
    "OpenClient",
    "UpstreamClient",
    "UpstreamResponse",
    "proxy_app",
    "transport_error",
    "upstream_url",
]


class UpstreamResponse(Protocol):
    """One upstream answer whose status line and headers have arrived (``httpx.Response``)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Any:
        """A case-insensitive mapping with ``get(name, default=None)``."""
        ...

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's bytes, decoded from its transfer and content encodings, as they arrive."""
        ...

    async def aread(self) -> bytes:
        """The whole body (unary answers and errors before the stream)."""
        ...

    async def aclose(self) -> None:
        """Give the connection back if the body was read to its end, else tear it down: a torn
        down connection is how the upstream learns that nobody wants the rest."""
        ...


class UpstreamClient(Protocol):
    """What ``chat_completions`` calls on ``app.state.client`` (``httpx.AsyncClient``)."""

    def build_request(
        self, method: str, url: str, *, json: Any = None, headers: Any = None
    ) -> Any: ...

    async def send(self, request: Any, *, stream: bool = False) -> UpstreamResponse: ...


OpenClient = Callable[[str], AbstractAsyncContextManager[UpstreamClient]]
"""Given the upstream's base URL, a context manager whose value is an :class:`UpstreamClient`."""


def upstream_url() -> str:
    """``$UPSTREAM_URL`` without a trailing slash, or ``solutions/proxy.py``'s startup error."""
    url = os.environ.get("UPSTREAM_URL")
    if not url:
        raise RuntimeError(
            "UPSTREAM_URL is not set: the proxy needs the upstream's base URL, "
            "e.g. UPSTREAM_URL=http://127.0.0.1:8001"
        )
    return url.rstrip("/")


def proxy_app(open_client: OpenClient, title: str) -> FastAPI:
    """``solutions/proxy.py``'s app with another client: ``open_client(upstream_url())`` is
    entered once at startup and its client serves every request until shutdown. Its resumable
    streams (notebook 15) too: the replay log and the routes that resume and stop them."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_client(upstream_url()) as client:
            app.state.client = client
            app.state.replay_log = make_log()
            app.state.producers = set()  # the resumable answers running here
            try:
                yield
            finally:
                for producer in app.state.producers:
                    producer.cancel()
                await asyncio.gather(*app.state.producers, return_exceptions=True)
                await app.state.replay_log.close()

    app = FastAPI(title=title, lifespan=lifespan)
    app.add_api_route(CHAT_PATH, chat_completions, methods=["POST"])
    app.add_api_route(STREAMS_PATH + "/{stream_id}", resume_stream, methods=["GET"])
    app.add_api_route(STREAMS_PATH + "/{stream_id}/cancel", stop_stream, methods=["POST"])
    return app


_TRANSLATED: dict[type[BaseException], type[httpx.TransportError]] = {}


def transport_error(exc: BaseException) -> httpx.TransportError:
    """``exc``, a transport failure of another client library, as the ``httpx.HTTPError`` that
    the relay handles. The class keeps the original's name, so the relay's messages ("the
    upstream stream failed: ClientPayloadError") name what really happened; raise it ``from
    exc`` to keep the original too."""
    kind = type(exc)
    translated = _TRANSLATED.get(kind)
    if translated is None:
        translated = type(kind.__name__, (httpx.TransportError,), {"__module__": kind.__module__})
        _TRANSLATED[kind] = translated
    return translated(str(exc))


def _httpx_is_an_upstream_client(client: httpx.AsyncClient) -> UpstreamClient:
    return client  # mypy checks here that httpx's client has the shape the seam writes down
