"""The reference proxy's relay, with the upstream client behind a small interface.

:func:`make_app` builds the ASGI app from an :class:`Upstream` (how to open one upstream
response). The behaviour follows ``labkit/reference/proxy.py``: include_usage always asked for
and hidden from clients that did not, a bounded queue between reader and writer, heartbeats
while the upstream is silent, a failure after the first byte as an in-stream error event.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

# The settings and the plain helpers are the reference's own, so the two cannot drift apart;
# only the relay loops below are rebuilt, around a client-neutral interface.
from labkit.reference.proxy import (
    FORWARDED_HEADERS,
    HEARTBEAT,
    HEARTBEAT_S,
    QUEUE_EVENTS,
    SSE_HEADERS,
    UPSTREAM_IDLE_S,
    Usage,
    error_body,
    event_data,
    log_usage,
)

__all__ = [
    "UPSTREAM_IDLE_S",
    "Upstream",
    "UpstreamResponse",
    "make_app",
    "relay",
    "relay_lean",
    "upstream_url",
]

END_OF_BODY_S = 1.0  # after [DONE], how long the reader may take to see the body's end


class UpstreamResponse(Protocol):
    """One upstream answer, headers already read."""

    status: int
    headers: Mapping[str, str]

    def lines(self) -> AsyncIterator[str]: ...
    async def read(self) -> bytes: ...
    async def close(self) -> None: ...


class Upstream(Protocol):
    """Opens upstream responses; ``errors`` are the client's transport exceptions."""

    errors: tuple[type[BaseException], ...]

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> UpstreamResponse: ...


def upstream_url() -> str:
    url = os.environ.get("UPSTREAM_URL")
    if not url:
        raise RuntimeError("UPSTREAM_URL is not set, e.g. UPSTREAM_URL=http://127.0.0.1:8001")
    return url


@dataclass
class Failed:
    message: str


async def read_events(
    upstream: UpstreamResponse,
    queue: asyncio.Queue[str | Failed],
    errors: tuple[type[BaseException], ...],
) -> None:
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
    finally:
        await upstream.close()


async def relay(
    upstream: UpstreamResponse, wants_usage: bool, errors: tuple[type[BaseException], ...]
) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[str | Failed] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    reader = asyncio.create_task(read_events(upstream, queue, errors))
    usage = Usage()
    outcome = "cancelled"
    try:
        while True:
            try:
                async with asyncio.timeout(HEARTBEAT_S):
                    item = await queue.get()
            except TimeoutError:
                yield HEARTBEAT
                continue
            if isinstance(item, Failed):
                outcome = "error"
                body = json.dumps(error_body(item.message, "upstream_error"))
                yield f"data: {body}\n\n".encode()
                return
            data = event_data(item)
            if data == "[DONE]":
                outcome = "completed"
                yield b"data: [DONE]\n\n"
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                chunk = None
            if isinstance(chunk, dict):
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
        reader.cancel()
        log_usage(usage, outcome)


# Chunks worth decoding: the first (for the id), a usage chunk, a possible error. A match is only
# a candidate (the text may contain the words); the decoded object decides.
MAYBE_USAGE = re.compile(r'"usage"\s*:\s*\{')
MAYBE_ERROR = re.compile(r'"error"\s*:')


async def relay_lean(
    upstream: UpstreamResponse, wants_usage: bool, errors: tuple[type[BaseException], ...]
) -> AsyncIterator[bytes]:
    """:func:`relay` with the same behaviour and two costs removed from the hot path:

    * a heartbeat deadline (a timer handle) only when the queue is empty, not for every chunk;
    * ``json.loads`` only for chunks that can matter (first, usage, error), not for all;

    and after ``[DONE]`` it lets the reader read the body to its end rather than cancelling it."""
    queue: asyncio.Queue[str | Failed] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    reader = asyncio.create_task(read_events(upstream, queue, errors))
    usage = Usage()
    outcome = "cancelled"
    try:
        while True:
            if queue.empty():
                try:
                    async with asyncio.timeout(HEARTBEAT_S):
                        item = await queue.get()
                except TimeoutError:
                    yield HEARTBEAT
                    continue
            else:
                item = queue.get_nowait()
            if isinstance(item, Failed):
                outcome = "error"
                body = json.dumps(error_body(item.message, "upstream_error"))
                yield f"data: {body}\n\n".encode()
                return
            data = event_data(item)
            if data == "[DONE]":
                outcome = "completed"
                yield b"data: [DONE]\n\n"
                return
            if usage.id is None or MAYBE_USAGE.search(data) or MAYBE_ERROR.search(data):
                try:
                    chunk = json.loads(data)
                except ValueError:
                    chunk = None
                if isinstance(chunk, dict):
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
        if outcome == "completed":
            # The body's end is already on its way: let the reader finish it, so the connection
            # goes back to the pool whole instead of being torn down by a cancellation.
            try:
                async with asyncio.timeout(END_OF_BODY_S):
                    await asyncio.shield(reader)
            except TimeoutError:
                reader.cancel()
        else:
            reader.cancel()
        log_usage(usage, outcome)


def make_app(
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]],
    upstream_of: Callable[[Request], Upstream],
    lean: bool = False,
) -> FastAPI:
    """The proxy app: ``lifespan`` puts the client on ``app.state``, ``upstream_of`` finds it.
    ``lean`` picks :func:`relay_lean` over :func:`relay`."""
    app = FastAPI(lifespan=lifespan)
    body_of = relay_lean if lean else relay

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(error_body("the body is not JSON", "invalid_request_error"), 400)
        if not isinstance(body, dict):
            return JSONResponse(error_body("the body must be an object", "invalid_request"), 400)
        upstream = upstream_of(request)
        headers = {k: request.headers[k] for k in FORWARDED_HEADERS if k in request.headers}
        stream = body.get("stream") is True
        wants_usage = False
        if stream:
            options = body.get("stream_options") or {}
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
            body_of(answer, wants_usage, upstream.errors),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
            background=BackgroundTask(answer.close),
        )

    return app


async def forward_whole(
    answer: UpstreamResponse, errors: tuple[type[BaseException], ...]
) -> Response:
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
