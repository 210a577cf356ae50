"""The reference proxy with its upstream client as a parameter.

``labkit/reference/proxy.py`` is the model answer the way notebook 06 teaches it, over httpx.
This module is the same proxy, property for property and error message for error message,
written around a two-method client interface (:class:`Upstream`) so that the client can be
chosen for speed: ``labkit/reference/aiohttp_proxy.py`` is this relay over aiohttp, and the
benchmarks (``bench/proxies``) run it over httpx with other pool settings and over httpx2.

The settings and the plain helpers (usage log, error shapes, body limit) are imported from the
reference, so the two cannot drift apart there; the grader's checks and the reliability matrix
run against both. One difference on the hot path, no difference in behaviour: the heartbeat
deadline is armed only when no event is waiting, instead of once per event.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect

from labkit.reference.proxy import (
    FORWARDED_HEADERS,
    HEARTBEAT,
    HEARTBEAT_S,
    MAX_BODY_BYTES,
    QUEUE_EVENTS,
    READER_GRACE_S,
    SSE_HEADERS,
    UPSTREAM_IDLE_S,
    Usage,
    bad_request,
    error_body,
    error_event,
    event_data,
    log_usage,
    not_json,
    read_body,
)

__all__ = [
    "UPSTREAM_IDLE_S",
    "Upstream",
    "UpstreamResponse",
    "make_app",
    "upstream_url",
]

CHAT = "/v1/chat/completions"


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


@dataclass
class Failed:
    message: str


async def read_events(
    upstream: UpstreamResponse,
    queue: asyncio.Queue[str | Failed],
    errors: tuple[type[BaseException], ...],
) -> None:
    """Put each complete SSE event on the bounded queue (see the reference's ``read_events``)."""
    try:
        lines: list[str] = []
        async for line in upstream.lines():
            if line:
                lines.append(line)
            elif lines:
                await queue.put("\n".join(lines))
                lines = []
        await queue.put(Failed("the upstream closed the stream before it finished"))
    except errors as exc:
        await queue.put(Failed(f"the upstream stream failed: {type(exc).__name__}"))
    except Exception as exc:
        await queue.put(Failed(f"reading the stream failed: {type(exc).__name__}"))
    finally:
        await upstream.close()


async def next_item(queue: asyncio.Queue[str | Failed]) -> str | Failed | None:
    """The next queued item, or None after ``HEARTBEAT_S`` of silence. A timer is armed only
    when the queue is empty: under load most events are already waiting."""
    if not queue.empty():
        return queue.get_nowait()
    try:
        async with asyncio.timeout(HEARTBEAT_S):
            return await queue.get()
    except TimeoutError:
        return None


async def relay(
    upstream: UpstreamResponse, wants_usage: bool, errors: tuple[type[BaseException], ...]
) -> AsyncIterator[bytes]:
    """The response body; the reference's ``relay``, event for event."""
    queue: asyncio.Queue[str | Failed] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    reader = asyncio.create_task(read_events(upstream, queue, errors))
    usage = Usage()
    outcome = "cancelled"
    try:
        while True:
            item = await next_item(queue)
            if item is None:
                yield HEARTBEAT
                continue
            if isinstance(item, Failed):
                outcome = "error"
                yield error_event(item.message)
                return
            data = event_data(item)
            if data == "[DONE]":
                outcome = "completed"
                yield b"data: [DONE]\n\n"
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if not isinstance(chunk, dict):
                continue
            usage.id = usage.id or chunk.get("id")
            if "error" in chunk:
                outcome = "error"
                yield f"{item}\n\n".encode()
                return
            if chunk.get("usage"):
                usage.take(chunk["usage"])
                if not wants_usage and not chunk.get("choices"):
                    continue
            yield f"{item}\n\n".encode()
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
        try:
            content = await read_body(request)
        except ClientDisconnect:
            return Response(status_code=499)
        if content is None:
            return bad_request(f"the body is larger than {MAX_BODY_BYTES} bytes", 413)
        try:
            body = json.loads(content, parse_constant=not_json)
        except ValueError:
            return bad_request("the body is not JSON")
        if not isinstance(body, dict):
            return bad_request("the body must be a JSON object")

        upstream: Upstream = request.app.state.upstream
        headers = {k: request.headers[k] for k in FORWARDED_HEADERS if k in request.headers}
        if api_key := os.environ.get("UPSTREAM_API_KEY"):
            headers["authorization"] = f"Bearer {api_key}"
        stream = body.get("stream") is True
        wants_usage = False
        if stream:
            options = body.get("stream_options") or {}
            if not isinstance(options, dict):
                return bad_request("stream_options must be an object")
            wants_usage = options.get("include_usage") is True
            body = {**body, "stream_options": {**options, "include_usage": True}}
        try:
            answer = await upstream.open(body, headers)
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
