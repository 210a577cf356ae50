"""A streaming proxy for OpenAI-style chat completions, written step by step in the notebooks.

Submission contract: a module-level ASGI ``app``; the upstream base URL comes from
``UPSTREAM_URL`` (no ``/v1``); one JSON line per upstream request is appended to the file named
by ``USAGE_LOG`` with ``id``, ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` and
``outcome`` (``completed``, ``cancelled`` or ``error``).

Each function below that holds ``# YOUR CODE HERE`` is written in one notebook's "build it"
cell, which writes it into this file (``%%proxy_part``). Which notebook, and what it adds:

* 02 ``make_client``, ``chat_completions``: forward each request with one async client;
* 03 ``sse_events``: hand on each event the moment it is complete, never a batch;
* 04 ``while_connected``, ``read_events``, ``relay``: a client that leaves stops the upstream in
  every window: while the route waits for the upstream's headers (queued in the engine, or a
  whole answer being generated: the route watches it), and once the body runs (the body owns
  the reader), before the first token and after;
* 05 ``ask_for_usage``, ``pass_on``, ``log_usage``: ask for usage, take it from the stream,
  log it once with the outcome;
* 06 ``error_event``, ``forward_whole``: failures after the 200 become error events; failures
  before it keep their status and ``Retry-After``;
* 07 ``upstream_timeout``, ``next_item``: no 5 s default, heartbeats, an idle deadline;
* 10 ``make_queue``: a bounded queue, so a slow client cannot grow us, and a stall deadline, so
  a client that takes nothing is let go and the upstream's generation (and its bill) stops.

Everything else (settings, types, request checks, the app) is given.

Run it: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn proxy:app --port 8000``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse as StarletteStreamingResponse
from starlette.types import Send

# ---------------------------------------------------------------------------------------------
# Settings (given)

CHAT_PATH = "/v1/chat/completions"
# Send a comment after this many seconds of upstream silence. sse-starlette uses 15 s; the lab
# asks for at most 3 s so that its keepalive check stays quick.
HEARTBEAT_S = float(os.environ.get("HEARTBEAT_S", "2"))
# Give up on an upstream that has sent nothing for this long (it is httpx's read timeout).
UPSTREAM_IDLE_S = float(os.environ.get("UPSTREAM_IDLE_S", "60"))
# Upstream connections the shared client may hold at once. Every open stream holds one for its
# whole life, so this is the most streams the proxy carries at once: httpx's default of 100
# would make the 101st stream wait in the pool for one to end (docs/connection-pool.md).
UPSTREAM_CONNECTIONS = int(os.environ.get("UPSTREAM_CONNECTIONS", "1000"))
# Events held between the upstream reader and a slow client before the reader waits.
QUEUE_EVENTS = 64
# Give up on a client that has taken nothing for this long while the queue was full: its
# response ends and the upstream is closed. (nginx's send_timeout, the same idea, is 60 s.)
STALL_DEADLINE_S = float(os.environ.get("STALL_DEADLINE_S", "30"))
# After the upstream's last event, how long the reader may take to read the body's end.
READER_GRACE_S = 5.0
# Larger request bodies get a 413: no lab prompt comes near this.
MAX_BODY_BYTES = 1_000_000
# Request headers passed on. The lab's mock upstream reads fault scenarios from the last one.
# Not Accept-Encoding: httpx asks the upstream for the encodings it decodes, and hands us the
# decoded body, whatever the client accepts.
FORWARDED_HEADERS = ("authorization", "x-mock-scenario")

HEARTBEAT = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"
# no-cache: a cache must check with us before reusing the answer; no-transform: no cache, CDN or
# proxy on the way may recompress or rewrite the body (that collapses a stream, notebook 03).
SSE_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}


# ---------------------------------------------------------------------------------------------
# Types and shapes (given)


@dataclass
class UpstreamFailed:
    """Put on the queue instead of an event when reading the upstream went wrong."""

    message: str


Item = str | UpstreamFailed
T = TypeVar("T")


class ClientGone(Exception):
    """Raised by ``while_connected`` when the client left before the work it watched was done."""


def client_gone() -> Response:
    """The answer to a client that has gone (nobody reads it; nginx logs 499 for this)."""
    return Response(status_code=499)


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


def error_body(message: str, type_: str) -> dict[str, Any]:
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": None, "code": None}}


def event_data(event: str) -> str:
    """The data of one SSE event: its ``data:`` lines' values, joined by newlines."""
    lines = event.split("\n")
    return "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))


# ---------------------------------------------------------------------------------------------
# Requests the proxy refuses to forward (given): each gets a 4xx in OpenAI's error shape.


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


async def read_request(request: Request) -> dict[str, Any] | Response:
    """The request's JSON object, or the response that refuses it."""
    try:
        content = await read_body(request)
    except ClientDisconnect:  # gone before its request was read: nothing to forward or log
        return client_gone()
    if content is None:
        return bad_request(f"the body is larger than {MAX_BODY_BYTES} bytes", 413)
    try:
        body = json.loads(content, parse_constant=not_json)
    except ValueError:
        return bad_request("the body is not JSON")
    if not isinstance(body, dict):
        return bad_request("the body must be a JSON object")
    if body.get("stream") is True and not isinstance(body.get("stream_options") or {}, dict):
        return bad_request("stream_options must be an object")
    return body


def upstream_headers(request: Request) -> dict[str, str]:
    """The client's headers worth passing on, with our own upstream key if we have one."""
    headers = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
    if api_key := os.environ.get("UPSTREAM_API_KEY"):
        headers["authorization"] = f"Bearer {api_key}"  # ours, not the client's: never logged
    return headers


# ---------------------------------------------------------------------------------------------
# The app (given): one upstream client for the app's whole life, made by ``make_client``.


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    upstream_url = os.environ.get("UPSTREAM_URL")
    if not upstream_url:
        raise RuntimeError(
            "UPSTREAM_URL is not set: the proxy needs the upstream's base URL, "
            "e.g. UPSTREAM_URL=http://127.0.0.1:8001"
        )
    async with make_client(upstream_url) as client:
        app.state.client = client
        yield


app = FastAPI(title="streaming proxy", lifespan=lifespan)


class StreamingResponse(StarletteStreamingResponse):
    """Starlette's ``StreamingResponse``, except that the body generator is closed however the
    response ends. When the body's task is cancelled while a ``send`` waits for a client that
    reads nothing, Starlette leaves the generator suspended at its ``yield``, and its
    ``finally`` (``relay``'s: stop the reader, log the usage) would run only whenever the
    garbage collector got to it."""

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            if isinstance(self.body_iterator, AsyncGenerator):
                await self.body_iterator.aclose()


# ---------------------------------------------------------------------------------------------
# 02 · The forwarding route and its client


def make_client(upstream_url: str) -> httpx.AsyncClient:
    """The one client every request shares: an async one, on ``upstream_url``, with the
    timeouts of ``upstream_timeout()``, and a pool of ``UPSTREAM_CONNECTIONS`` connections, all
    of them kept open between requests (every open stream holds one)."""
    ### BEGIN SOLUTION
    limits = httpx.Limits(
        max_connections=UPSTREAM_CONNECTIONS, max_keepalive_connections=UPSTREAM_CONNECTIONS
    )
    return httpx.AsyncClient(base_url=upstream_url, timeout=upstream_timeout(), limits=limits)
    ### END SOLUTION


@app.post(CHAT_PATH)
async def chat_completions(request: Request) -> Response:
    """Forward one chat completion; stream the answer back through ``relay``."""
    body = await read_request(request)
    if isinstance(body, Response):
        return body
    ### BEGIN SOLUTION
    client: httpx.AsyncClient = request.app.state.client
    stream = body.get("stream") is True
    client_wants_usage = False
    if stream:
        body, client_wants_usage = ask_for_usage(body)
    upstream_request = client.build_request(
        "POST", CHAT_PATH, json=body, headers=upstream_headers(request)
    )
    try:
        # Only the status line and headers, before the first token. They can be long coming: an
        # engine whose slots are all busy sends none until one frees, and a whole answer comes
        # with its headers once it is generated. So the client is watched meanwhile.
        upstream = await while_connected(request, client.send(upstream_request, stream=True))
    except ClientGone:  # left while the request waited: the upstream request was closed
        log_usage(Usage(), "cancelled")
        return client_gone()
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
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# 03 · One event at a time


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Group the upstream's lines into SSE events (an event ends at a blank line) and yield each
    event, its lines joined by newlines, as soon as its blank line arrives."""
    ### BEGIN SOLUTION
    event: list[str] = []
    async for line in lines:
        if line:
            event.append(line)
        elif event:
            yield "\n".join(event)
            event = []
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# 04 · A client that leaves stops the upstream: watched in the route, and by the body


async def while_connected(request: Request, work: Awaitable[T]) -> T:
    """What ``work`` returns, if it is done before the client leaves. If the client leaves first
    (its ASGI ``receive`` says ``http.disconnect``), cancel ``work`` at once, let it finish
    cancelling (an httpx request closes its connection, so the upstream sees the hang-up as if
    from the client), and raise ``ClientGone``. Starlette watches the client only while it sends
    a response body: this is the watch for what the route awaits before that."""
    ### BEGIN SOLUTION
    ### STAND-IN: return await work

    async def disconnected() -> None:
        # The body has been read, so the next message uvicorn gives is the disconnect.
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))  # its own cleanup (closing the upstream) runs to the end
    if task.cancelled():
        raise ClientGone()
    return task.result()
    ### END SOLUTION


async def read_events(upstream: httpx.Response, queue: asyncio.Queue[Item]) -> None:
    """The reader task: put each event of ``sse_events`` on the queue. However the upstream ends
    (before ``[DONE]``, or with an exception) put an ``UpstreamFailed`` last, so the body never
    waits for ever, and always close the upstream response."""
    ### BEGIN SOLUTION
    try:
        async for event in sse_events(upstream.aiter_lines()):
            await queue.put(event)
        # Still being read after the end: the upstream closed before its `data: [DONE]`.
        await queue.put(UpstreamFailed("the upstream closed the stream before it finished"))
    except httpx.HTTPError as exc:  # dropped connection, idle deadline, broken chunking
        await queue.put(UpstreamFailed(f"the upstream stream failed: {type(exc).__name__}"))
    except Exception as exc:  # anything else must still end the stream, never leave it waiting
        await queue.put(UpstreamFailed(f"reading the stream failed: {type(exc).__name__}"))
    finally:
        await upstream.aclose()
    ### END SOLUTION


async def relay(upstream: httpx.Response, client_wants_usage: bool) -> AsyncIterator[bytes]:
    """The response body. A reader task fills a queue (``make_queue``); this drains it: a
    heartbeat when ``next_item`` says the upstream is silent, an error event for an
    ``UpstreamFailed``, and for each event what ``pass_on`` says. However the body ends, stop
    the reader (at once if the client left) and log the usage once."""
    ### BEGIN SOLUTION
    ### STAND-IN: async for piece in upstream.aiter_bytes():
    ### STAND-IN:     yield piece
    queue = make_queue()
    reader = asyncio.create_task(read_events(upstream, queue))
    usage = Usage()
    outcome = "cancelled"  # stays so if the client leaves: Starlette cancels us at an await
    clock = asyncio.get_running_loop().time
    sent_at = clock()  # heartbeats count from the last bytes the client got, not the last item
    try:
        while True:
            item = await next_item(queue)
            if item is None:
                yield HEARTBEAT
                sent_at = clock()
                continue
            if isinstance(item, UpstreamFailed):
                outcome = "error"
                yield error_event(item.message)
                return
            send, ending = pass_on(item, usage, client_wants_usage)
            if send is None and clock() - sent_at >= HEARTBEAT_S:
                send = HEARTBEAT  # items we drop are no sign of life to the client
            if send is not None:
                yield send
                sent_at = clock()
            if ending is not None:
                outcome = ending
                return
    finally:
        if outcome == "cancelled":
            reader.cancel()  # the client left: stop reading, which closes the upstream
        else:
            # The answer is over; let the reader take the body's last bytes so httpx puts the
            # connection back in its pool (cancelling that read leaks it), but not for ever.
            asyncio.get_running_loop().call_later(READER_GRACE_S, reader.cancel)
        log_usage(usage, outcome)
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# 05 · Usage: ask for it, take it from the stream, log it once


def ask_for_usage(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The body to send upstream, with ``stream_options.include_usage`` on (the client's other
    stream options kept), and whether the client asked for usage itself."""
    ### BEGIN SOLUTION
    ### STAND-IN: return body, False
    options = body.get("stream_options") or {}
    client_wants_usage = options.get("include_usage") is True
    return {**body, "stream_options": {**options, "include_usage": True}}, client_wants_usage
    ### END SOLUTION


def pass_on(event: str, usage: Usage, client_wants_usage: bool) -> tuple[bytes | None, str | None]:
    """What to send the client for one upstream event (None: nothing), and the outcome if the
    stream ends with it (None: it goes on). Takes the id and the usage into ``usage``. An
    upstream's comment goes on as it came: it keeps the client's connection busy."""
    ### BEGIN SOLUTION
    ### STAND-IN: return f"{event}\n\n".encode(), "completed" if "[DONE]" in event else None
    if all(line.startswith(":") for line in event.split("\n")):
        return f"{event}\n\n".encode(), None
    data = event_data(event)
    if data == "[DONE]":
        return DONE, "completed"
    try:
        chunk = json.loads(data)
    except ValueError:
        return None, None  # a broken frame would crash the client's parser: drop it
    if not isinstance(chunk, dict):
        return None, None  # JSON but not a chunk: as unreadable to the client
    usage.id = usage.id or chunk.get("id")
    if "error" in chunk:
        return f"{event}\n\n".encode(), "error"
    if chunk.get("usage"):
        usage.take(chunk["usage"])
        if not client_wants_usage:
            if not chunk.get("choices"):
                return None, None  # we asked for this chunk, the client did not
            # Some servers put usage on a chunk that still has choices: pass those on, only.
            del chunk["usage"]
            return f"data: {json.dumps(chunk)}\n\n".encode(), None
    return f"{event}\n\n".encode(), None
    ### END SOLUTION


def log_usage(usage: Usage, outcome: str) -> None:
    """Append one JSON line to ``$USAGE_LOG``: the ``Usage`` fields and the outcome. Counts stay
    null when the upstream never sent them."""
    ### BEGIN SOLUTION
    ### STAND-IN: return
    path = os.environ.get("USAGE_LOG")
    if not path:
        return
    line = json.dumps({**asdict(usage), "outcome": outcome})
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# 06 · Errors: in the stream after the 200, as a status before it


def error_event(message: str) -> bytes:
    """A failure after the stream started, as an event the OpenAI SDK raises as ``APIError``."""
    ### BEGIN SOLUTION
    return f"data: {json.dumps(error_body(message, 'upstream_error'))}\n\n".encode()
    ### END SOLUTION


async def forward_whole(upstream: httpx.Response) -> Response:
    """A unary answer or an error before the stream: read it whole and pass on its status, body,
    media type and ``Retry-After``; log its usage once (``error`` for a status of 400 or more)."""
    ### BEGIN SOLUTION
    try:
        content = await upstream.aread()  # decoded: gzip from the upstream is not the client's
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
    retry_after = upstream.headers.get("retry-after")
    return Response(
        content,
        status_code=upstream.status_code,
        headers={"Retry-After": retry_after} if retry_after else None,
        media_type=upstream.headers.get("content-type", "application/json"),
    )
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# 07 · Long streams: timeouts, heartbeats, an idle deadline


def upstream_timeout() -> httpx.Timeout:
    """The client's timeouts: quick to connect, but ``UPSTREAM_IDLE_S`` of silence allowed
    between two reads (httpx's default of 5 s for everything kills a slow first token)."""
    ### BEGIN SOLUTION
    ### STAND-IN: return httpx.Timeout(5.0)
    return httpx.Timeout(connect=5.0, read=UPSTREAM_IDLE_S, write=10.0, pool=10.0)
    ### END SOLUTION


async def next_item(queue: asyncio.Queue[Item]) -> Item | None:
    """The next item on the queue, or None once the upstream has been silent for
    ``HEARTBEAT_S`` (the body then sends a heartbeat and asks again)."""
    ### BEGIN SOLUTION
    ### STAND-IN: return await queue.get()
    if not queue.empty():
        return queue.get_nowait()  # under load most events are already waiting: no timer
    try:
        async with asyncio.timeout(HEARTBEAT_S):
            return await queue.get()
    except TimeoutError:
        return None
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# 10 · Backpressure and a stall deadline


def make_queue() -> asyncio.Queue[Item]:
    """The queue between the reader task and the body (``relay`` makes it in the body's task).
    Bounded: a slow client holds the reader back, so it cannot grow our memory. A client that
    has taken nothing for ``STALL_DEADLINE_S`` while an event waited for it is given up on: the
    upstream is closed, the client's connection ends, and the usage is logged once, as
    ``cancelled``. A client that reads, however slowly, and an upstream that is silent are not
    stalls."""
    ### BEGIN SOLUTION
    ### STAND-IN: return asyncio.Queue()
    queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    put, body = queue.put, asyncio.current_task()  # relay calls us in the body's task

    async def put_or_give_up(item: Item) -> None:
        try:
            async with asyncio.timeout(STALL_DEADLINE_S):
                await put(item)
        except TimeoutError:  # the queue stayed full: the client took nothing meanwhile
            if body is not None:
                body.cancel()  # its send stops waiting; the item goes nowhere

    queue.put = put_or_give_up  # type: ignore[method-assign]
    return queue
    ### END SOLUTION
