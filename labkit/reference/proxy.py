"""A correct streaming proxy for OpenAI-style chat completions: the lab's model answer.

Submission contract: a module-level ASGI ``app``; the upstream base URL comes from
``UPSTREAM_URL`` (no ``/v1``); one JSON line per upstream request is appended to the file named
by ``USAGE_LOG`` with ``id``, ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` and
``outcome`` (``completed``, ``cancelled`` or ``error``).

What makes it correct, one property per lab step:

1. forward, don't buffer: each upstream event is sent on as soon as it is complete;
2. cancel on disconnect: everything that waits on the upstream, including the wait for the first
   token, happens inside the response body, so a client that leaves cancels it;
3. capture usage: ask the upstream for ``include_usage`` always, log it once with the outcome,
   and hide the usage chunk from clients that did not ask for it;
4. errors as events: a failure after the stream started becomes an OpenAI-shaped
   ``data: {"error": ...}`` event, then the stream ends; a failure before it keeps its status;
5. long timeouts, heartbeats: no 5 s default read timeout, ``: keep-alive`` comments while the
   upstream is silent, and an idle deadline so a heartbeat cannot hide a dead upstream;
6. bounded memory: a small queue between the upstream reader and the client writer, so a slow
   client slows the upstream down instead of growing the proxy.

Run it: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn labkit.reference.proxy:app --port 8000``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect

# Send a comment after this many seconds of upstream silence. sse-starlette uses 15 s; the lab
# asks for at most 3 s so that its keepalive check stays quick.
HEARTBEAT_S = float(os.environ.get("HEARTBEAT_S", "2"))
# Give up on an upstream that has sent nothing for this long (it is httpx's read timeout).
UPSTREAM_IDLE_S = float(os.environ.get("UPSTREAM_IDLE_S", "60"))
# Events held between the upstream reader and a slow client before the reader waits.
QUEUE_EVENTS = 64
# After the upstream's last event, how long the reader may take to read the body's end.
READER_GRACE_S = 5.0
# Larger request bodies get a 413: no lab prompt comes near this.
MAX_BODY_BYTES = 1_000_000

# httpx's default is 5 s for everything, which kills any stream whose first token is slower.
TIMEOUT = httpx.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)
# Request headers passed on. The lab's mock upstream reads fault scenarios from the last one.
FORWARDED_HEADERS = ("authorization", "x-mock-scenario")

HEARTBEAT = b": keep-alive\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    upstream_url = os.environ.get("UPSTREAM_URL")
    if not upstream_url:
        raise RuntimeError(
            "UPSTREAM_URL is not set: the proxy needs the upstream's base URL, "
            "e.g. UPSTREAM_URL=http://127.0.0.1:8001"
        )
    async with httpx.AsyncClient(base_url=upstream_url, timeout=TIMEOUT) as client:
        app.state.client = client
        yield


app = FastAPI(title="reference streaming proxy", lifespan=lifespan)


# ---------------------------------------------------------------------------------------------
# Usage log


@dataclass
class Usage:
    """What one request cost, as far as the upstream told us."""

    id: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None

    def take(self, usage: dict[str, Any]) -> None:
        self.prompt_tokens = usage.get("prompt_tokens")
        self.completion_tokens = usage.get("completion_tokens")
        self.total_tokens = usage.get("total_tokens")


def log_usage(usage: Usage, outcome: str) -> None:
    """Append one line to ``$USAGE_LOG``. Counts stay null when the upstream never sent them."""
    path = os.environ.get("USAGE_LOG")
    if not path:
        return
    line = json.dumps({**asdict(usage), "outcome": outcome})
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


# ---------------------------------------------------------------------------------------------
# Errors in OpenAI's shape


def error_body(message: str, type_: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": None}}


def error_event(message: str) -> bytes:
    """A mid-stream failure as an event the OpenAI SDK raises as ``APIError``."""
    return f"data: {json.dumps(error_body(message, 'upstream_error'))}\n\n".encode()


# ---------------------------------------------------------------------------------------------
# The stream: a reader task fills a small queue, the response body drains it.


@dataclass
class UpstreamFailed:
    message: str


async def read_events(upstream: httpx.Response, queue: asyncio.Queue[str | UpstreamFailed]) -> None:
    """Put each complete SSE event (its lines, joined) on the queue.

    The queue is bounded: when the client reads slowly, ``put`` waits, this task stops reading,
    and TCP makes the upstream wait too. Closing the response here is what stops the upstream's
    generation when the client leaves (the body cancels this task).
    """
    try:
        lines: list[str] = []
        async for line in upstream.aiter_lines():
            if line:
                lines.append(line)
            elif lines:
                await queue.put("\n".join(lines))
                lines = []
        # Still being read after the end: the upstream closed before its `data: [DONE]`.
        await queue.put(UpstreamFailed("the upstream closed the stream before it finished"))
    except httpx.HTTPError as exc:  # dropped connection, idle deadline, broken chunking
        await queue.put(UpstreamFailed(f"the upstream stream failed: {type(exc).__name__}"))
    except Exception as exc:  # anything else must still end the stream, never leave it waiting
        await queue.put(UpstreamFailed(f"reading the stream failed: {type(exc).__name__}"))
    finally:
        await upstream.aclose()


def event_data(event: str) -> str:
    lines = event.split("\n")
    return "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))


async def relay(upstream: httpx.Response, client_wants_usage: bool) -> AsyncIterator[bytes]:
    """The response body: forward events, heartbeat while silent, log usage once at the end."""
    queue: asyncio.Queue[str | UpstreamFailed] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    reader = asyncio.create_task(read_events(upstream, queue))
    usage = Usage()
    outcome = "cancelled"  # stays so if the client leaves: Starlette cancels us at an await
    try:
        while True:
            try:
                async with asyncio.timeout(HEARTBEAT_S):
                    item = await queue.get()
            except TimeoutError:
                yield HEARTBEAT
                continue
            if isinstance(item, UpstreamFailed):
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
                continue  # a broken frame would crash the client's parser: drop it
            if isinstance(chunk, dict):
                usage.id = usage.id or chunk.get("id")
                if "error" in chunk:
                    outcome = "error"
                    yield f"{item}\n\n".encode()
                    return
                if chunk.get("usage"):
                    usage.take(chunk["usage"])
                    if not client_wants_usage and not chunk.get("choices"):
                        continue  # we asked for this chunk, the client did not
            else:
                continue  # JSON but not a chunk: as unreadable to the client as a broken frame
            yield f"{item}\n\n".encode()
    finally:
        if outcome == "cancelled":
            reader.cancel()  # the client left: stop reading, which closes the upstream
        else:
            # The answer is over; let the reader take the body's last bytes so httpx puts the
            # connection back in its pool (cancelling that read leaks it), but not for ever.
            asyncio.get_running_loop().call_later(READER_GRACE_S, reader.cancel)
        log_usage(usage, outcome)


# ---------------------------------------------------------------------------------------------
# The route


def not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")  # Python reads it; httpx could not send it on


def bad_request(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse(error_body(message, "invalid_request_error"), status)


async def read_body(request: Request) -> bytes | None:
    """The request body, or None as soon as it is larger than ``MAX_BODY_BYTES``."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        return None
    content = b""
    async for part in request.stream():
        content += part
        if len(content) > MAX_BODY_BYTES:
            return None
    return content


@app.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    try:
        content = await read_body(request)
    except ClientDisconnect:  # gone before its request was read: nothing to forward or log
        return Response(status_code=499)
    if content is None:
        return bad_request(f"the body is larger than {MAX_BODY_BYTES} bytes", 413)
    try:
        body = json.loads(content, parse_constant=not_json)
    except ValueError:
        return bad_request("the body is not JSON")
    if not isinstance(body, dict):
        return bad_request("the body must be a JSON object")

    client: httpx.AsyncClient = request.app.state.client
    headers = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
    if api_key := os.environ.get("UPSTREAM_API_KEY"):
        headers["authorization"] = f"Bearer {api_key}"  # ours, not the client's: never logged
    stream = body.get("stream") is True
    client_wants_usage = False
    if stream:
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            return bad_request("stream_options must be an object")
        client_wants_usage = options.get("include_usage") is True
        body = {**body, "stream_options": {**options, "include_usage": True}}

    upstream_request = client.build_request(
        "POST", "/v1/chat/completions", json=body, headers=headers
    )
    try:
        # Only the status line and headers: they arrive at once, before the first token.
        upstream = await client.send(upstream_request, stream=True)
    except httpx.HTTPError as exc:
        log_usage(Usage(), "error")
        message = f"the upstream is unreachable: {type(exc).__name__}"
        return JSONResponse(error_body(message, "upstream_error"), 502)

    if upstream.status_code >= 400 or not stream:
        return await forward_whole(upstream)
    return StreamingResponse(
        relay(upstream, client_wants_usage),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
        # If the client left before the body started, `relay` never runs: close the upstream here.
        background=BackgroundTask(upstream.aclose),
    )


async def forward_whole(upstream: httpx.Response) -> Response:
    """A unary answer or an error before the stream: pass on status, body and Retry-After."""
    try:
        content = await upstream.aread()
    except httpx.HTTPError as exc:
        log_usage(Usage(), "error")
        message = f"the upstream answer failed: {type(exc).__name__}"
        return JSONResponse(error_body(message, "upstream_error"), 502)
    finally:
        await upstream.aclose()
    usage = Usage()
    if upstream.status_code < 400:
        try:
            answer = json.loads(content)
            usage.id = answer.get("id")
            usage.take(answer.get("usage") or {})
        except (ValueError, AttributeError):
            pass
    log_usage(usage, "completed" if upstream.status_code < 400 else "error")
    headers = (
        {"Retry-After": upstream.headers["retry-after"]}
        if "retry-after" in upstream.headers
        else None
    )
    return Response(
        content,
        status_code=upstream.status_code,
        headers=headers,
        media_type=upstream.headers.get("content-type", "application/json"),
    )
