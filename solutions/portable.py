"""The reference proxy with its upstream client as a parameter.

``solutions/proxy.py`` is the proxy the notebooks build, over httpx. This module is the same
proxy, property for property and error message for error message, around a two-method client
interface (:class:`Upstream`) so that the client can be chosen for speed:
``solutions/aiohttp_proxy.py`` is this relay over aiohttp, and the benchmarks (``bench/proxies``)
run it over httpx with other pool settings and over httpx2.

Everything that does not touch the client comes from ``solutions/proxy.py`` itself: the
settings, the request checks, the framing (``sse_events``), what to pass on for each event
(``pass_on``), heartbeats (``next_item``), the bounded queue, usage and error shapes. What is
left here is the part that differs: how the reader reads, and the route around ``open``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from solutions.proxy import (
    CHAT_PATH,
    HEARTBEAT,
    READER_GRACE_S,
    SSE_HEADERS,
    UPSTREAM_IDLE_S,
    Item,
    UpstreamFailed,
    Usage,
    ask_for_usage,
    error_body,
    error_event,
    log_usage,
    make_queue,
    next_item,
    pass_on,
    read_request,
    sse_events,
    upstream_headers,
)

__all__ = [
    "CHAT",
    "UPSTREAM_IDLE_S",
    "Upstream",
    "UpstreamResponse",
    "make_app",
    "upstream_url",
]

CHAT = CHAT_PATH


class UpstreamResponse(Protocol):
    """One upstream answer whose status line and headers have arrived."""

    status: int
    headers: Mapping[str, str]

    def lines(self) -> AsyncIterator[str]:
        """The body's lines without their line ends, as they arrive."""
        ...

    async def read(self) -> bytes:
        """The whole body (unary answers and errors before the stream)."""
        ...

    async def close(self) -> None:
        """Give the connection back if the body was read to its end, else tear it down: a torn
        down connection is how the upstream learns that nobody wants the rest."""
        ...


class Upstream(Protocol):
    """Opens upstream chat completions; ``errors`` are the client's transport exceptions."""

    errors: tuple[type[BaseException], ...]

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> UpstreamResponse: ...


def upstream_url() -> str:
    """``$UPSTREAM_URL`` without a trailing slash, or the reference's startup error."""
    url = os.environ.get("UPSTREAM_URL")
    if not url:
        raise RuntimeError(
            "UPSTREAM_URL is not set: the proxy needs the upstream's base URL, "
            "e.g. UPSTREAM_URL=http://127.0.0.1:8001"
        )
    return url.rstrip("/")


async def read_events(
    upstream: UpstreamResponse,
    queue: asyncio.Queue[Item],
    errors: tuple[type[BaseException], ...],
) -> None:
    """``solutions/proxy.py``'s ``read_events`` with the client's own exception types."""
    try:
        async for event in sse_events(upstream.lines()):
            await queue.put(event)
        await queue.put(UpstreamFailed("the upstream closed the stream before it finished"))
    except errors as exc:
        await queue.put(UpstreamFailed(f"the upstream stream failed: {type(exc).__name__}"))
    except Exception as exc:
        await queue.put(UpstreamFailed(f"reading the stream failed: {type(exc).__name__}"))
    finally:
        await upstream.close()


async def relay(
    upstream: UpstreamResponse, wants_usage: bool, errors: tuple[type[BaseException], ...]
) -> AsyncIterator[bytes]:
    """The response body: ``solutions/proxy.py``'s ``relay``, around this module's reader."""
    queue = make_queue()
    reader = asyncio.create_task(read_events(upstream, queue, errors))
    usage = Usage()
    outcome = "cancelled"
    try:
        while True:
            item = await next_item(queue)
            if item is None:
                yield HEARTBEAT
                continue
            if isinstance(item, UpstreamFailed):
                outcome = "error"
                yield error_event(item.message)
                return
            send, ending = pass_on(item, usage, wants_usage)
            if send is not None:
                yield send
            if ending is not None:
                outcome = ending
                return
    finally:
        if outcome == "cancelled":
            reader.cancel()
        else:
            # Let the reader read the body's end so the connection can be reused, not for ever.
            asyncio.get_running_loop().call_later(READER_GRACE_S, reader.cancel)
        log_usage(usage, outcome)


def make_app(
    open_upstream: Callable[[], AbstractAsyncContextManager[Upstream]],
    title: str = "reference streaming proxy (portable)",
) -> FastAPI:
    """The proxy app. ``open_upstream()`` is entered once, at startup, and its upstream (the
    client with its pool) serves every request until shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_upstream() as upstream:
            app.state.upstream = upstream
            yield

    app = FastAPI(title=title, lifespan=lifespan)

    @app.post(CHAT)
    async def chat_completions(request: Request) -> Response:
        body = await read_request(request)
        if isinstance(body, Response):
            return body
        upstream: Upstream = request.app.state.upstream
        stream = body.get("stream") is True
        wants_usage = False
        if stream:
            body, wants_usage = ask_for_usage(body)
        try:
            answer = await upstream.open(body, upstream_headers(request))
        except upstream.errors as exc:
            log_usage(Usage(), "error")
            message = f"the upstream is unreachable: {type(exc).__name__}"
            return JSONResponse(error_body(message, "upstream_error"), 502)
        if answer.status >= 400 or not stream:
            return await forward_whole(answer, upstream.errors)
        return StreamingResponse(
            relay(answer, wants_usage, upstream.errors),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
            background=BackgroundTask(answer.close),
        )

    return app


async def forward_whole(
    answer: UpstreamResponse, errors: tuple[type[BaseException], ...]
) -> Response:
    """A unary answer or an error before the stream: status, body and Retry-After passed on."""
    try:
        content = await answer.read()
    except errors as exc:
        log_usage(Usage(), "error")
        message = f"the upstream answer failed: {type(exc).__name__}"
        return JSONResponse(error_body(message, "upstream_error"), 502)
    finally:
        await answer.close()
    usage = Usage()
    if answer.status < 400:
        try:
            parsed = json.loads(content)
            usage.id = parsed.get("id")
            usage.take(parsed.get("usage") or {})
        except (ValueError, AttributeError):
            pass
    log_usage(usage, "completed" if answer.status < 400 else "error")
    retry = answer.headers.get("retry-after")
    return Response(
        content,
        status_code=answer.status,
        headers={"Retry-After": retry} if retry else None,
        media_type=answer.headers.get("content-type", "application/json"),
    )
