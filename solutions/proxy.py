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
  a client that takes nothing is let go and the upstream's generation (and its bill) stops;
* 15 ``asks_to_resume``, ``produce``, ``follow``, ``resume_stream``, ``stop_stream``: a stream
  the client asked to be resumable (``X-Resumable: true``) outlives its connection: a replay log
  keeps its events, a client that comes back with ``Last-Event-ID`` gets what it missed, and an
  explicit Stop (or nobody back within a grace period) cancels the upstream.

Everything else (settings, types, request checks, the app, the replay logs) is given. With
``REDIS_URL`` set, the replay log is a Redis stream per answer, so replicas resume each other's
streams; without it, it lives in this process.

Run it: ``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn proxy:app --port 8000``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import secrets
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from contextlib import aclosing, asynccontextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar, cast

import httpx
import redis.asyncio as aioredis
import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse as StarletteStreamingResponse
from starlette.types import Receive, Scope, Send

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

# Resumable streams (15). A client opts in per request with this header set to "true".
RESUMABLE_HEADER = "x-resumable"
STREAMS_PATH = "/v1/streams"
# A resumable answer whose client has gone goes on for this long; nobody back by then cancels it.
RESUME_GRACE_S = float(os.environ.get("RESUME_GRACE_S", "10"))
# The replay log keeps at most this many events of one answer, for this long after its last one.
REPLAY_EVENTS = int(os.environ.get("REPLAY_EVENTS", "4096"))
REPLAY_KEEP_S = float(os.environ.get("REPLAY_KEEP_S", "300"))
# How often a running answer asks the log whether anybody is still reading it.
WATCH_S = 0.25
# With this set the replay logs live in Redis, shared by every replica; without, in this process.
REDIS_URL = os.environ.get("REDIS_URL")
# Redis connections one replica may hold. A running answer (BLPOP, waiting for Stop) and each
# client reading one (XREAD BLOCK) hold a connection while they wait: two per stream, and some
# for the short commands. (redis-py's default pool of 100 failed the 51st stream.)
REDIS_CONNECTIONS = 2 * UPSTREAM_CONNECTIONS + 100

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
# Replay logs (given): where a resumable answer's events wait for a client that comes back (15).
#
# A log holds, per answer, its events numbered from 1, and last an end (``None``). Every follower
# of the answer reads it from its own cursor; the answer's producer appends to it and asks it
# whether anybody still reads, and whether somebody pressed Stop.

Entry = tuple[int, bytes | None]  # (sequence number, the event's bytes); None: the answer is over


class NotKept(Exception):
    """The log has no such answer (never, or no longer), or no longer the events asked for."""


class LogFailed(Exception):
    """The replay log could not be reached (Redis is down or unreachable)."""


class ReplayLog(Protocol):
    async def open(self, stream_id: str) -> None:
        """Start an answer's log, empty, read by its first client from now on."""

    async def append(self, stream_id: str, seq: int, event: bytes | None) -> None:
        """Add event ``seq`` (``None``: the end), dropping the oldest past ``REPLAY_EVENTS``."""

    async def read(self, stream_id: str, after: int, wait_s: float) -> list[Entry]:
        """The entries after ``after``; if there are none yet, wait up to ``wait_s`` for some
        ([] if none came). Counts as somebody reading the answer, for ``wait_s`` and the grace
        period after. Raises ``NotKept`` for an unknown answer or events no longer kept."""

    async def watched(self, stream_id: str) -> bool:
        """Whether anybody has read the answer within the grace period (or is reading it)."""

    async def stop(self, stream_id: str) -> bool:
        """Ask the answer's producer, wherever it runs, to stop; False for an unknown answer."""

    async def stopped(self, stream_id: str) -> None:
        """Return once somebody asked the answer to stop."""

    async def close(self) -> None:
        """Let go of what the log holds open."""


@dataclass
class _Kept:
    events: deque[Entry]
    grew: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    read_until: float = 0.0  # when the last reader's wait ends; the grace period counts from it


def _check_cursor(after: int, first: int, last: int) -> None:
    """Raise ``NotKept`` unless a log holding events ``first`` to ``last`` can give all the
    events after ``after``."""
    if after + 1 < first:
        raise NotKept(f"the events after {after} are no longer kept (the log starts at {first})")
    if after > last:
        raise NotKept(f"there is no event {after}: the last one so far is {last}")


class MemoryLog:
    """Replay logs in this process: one bounded deque per answer, dropped ``REPLAY_KEEP_S``
    after its end. Only this process can resume its answers."""

    def __init__(self, max_events: int, keep_s: float, grace_s: float) -> None:
        self.max_events, self.keep_s, self.grace_s = max_events, keep_s, grace_s
        self.answers: dict[str, _Kept] = {}
        self.clock = asyncio.get_running_loop().time

    def _kept(self, stream_id: str) -> _Kept:
        if (kept := self.answers.get(stream_id)) is None:
            raise NotKept(f"no stream {stream_id} here: it never was, or it ended long ago")
        return kept

    async def open(self, stream_id: str) -> None:
        self.answers[stream_id] = _Kept(deque(maxlen=self.max_events), read_until=self.clock())

    async def append(self, stream_id: str, seq: int, event: bytes | None) -> None:
        kept = self._kept(stream_id)
        kept.events.append((seq, event))
        kept.grew.set()
        kept.grew = asyncio.Event()
        if event is None:
            asyncio.get_running_loop().call_later(self.keep_s, self.answers.pop, stream_id, None)

    def _after(self, kept: _Kept, after: int) -> list[Entry]:
        if not kept.events:
            _check_cursor(after, 1, 0)
            return []
        (first, _), (last, event) = kept.events[0], kept.events[-1]
        _check_cursor(after, first, last if event is not None else last - 1)
        return list(itertools.islice(kept.events, after + 1 - first, None))

    async def read(self, stream_id: str, after: int, wait_s: float) -> list[Entry]:
        kept = self._kept(stream_id)
        kept.read_until = max(kept.read_until, self.clock() + wait_s)
        if (entries := self._after(kept, after)) or wait_s <= 0:
            return entries
        with suppress(TimeoutError):
            await asyncio.wait_for(kept.grew.wait(), wait_s)
        return self._after(kept, after)

    async def watched(self, stream_id: str) -> bool:
        kept = self.answers.get(stream_id)
        return kept is not None and self.clock() < kept.read_until + self.grace_s

    async def stop(self, stream_id: str) -> bool:
        if (kept := self.answers.get(stream_id)) is None:
            return False
        kept.stop.set()
        return True

    async def stopped(self, stream_id: str) -> None:
        await self._kept(stream_id).stop.wait()

    async def close(self) -> None:
        self.answers.clear()


class RedisLog:
    """Replay logs in Redis, so that any replica can resume any answer and stop it.

    Each answer is a Redis stream, ``replay:{id}``, capped at ``REPLAY_EVENTS`` entries and
    expiring ``REPLAY_KEEP_S`` after its last. An entry's id is ``1-{seq}`` (``1-0`` marks the
    start), so a cursor is a stream id and ``XREAD BLOCK`` from it gives what came after, then
    waits for the live tail. A stream and not pub/sub: a message published while nobody listens
    is lost, and the client that comes back is exactly the one that was not listening.
    ``seen:{id}`` (expiring) says somebody reads; ``stop:{id}``, a list, carries Stop to the
    producer, which waits on it with ``BLPOP``."""

    def __init__(self, url: str, max_events: int, keep_s: float, grace_s: float) -> None:
        self.max_events, self.keep_ms = max_events, int(keep_s * 1000)
        self.grace_ms = int(grace_s * 1000)
        # Timeouts so that a Redis that died or is unreachable is an error in seconds, not a
        # hang; reads never block longer than HEARTBEAT_S, well inside the socket timeout.
        self.redis = aioredis.from_url(
            url,
            socket_connect_timeout=2,
            socket_timeout=HEARTBEAT_S + 3,
            max_connections=REDIS_CONNECTIONS,
            # Once, at once: a pooled connection from before a Redis restart fails its first
            # command, and the retry on a fresh one succeeds. A dead Redis fails both.
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[redis.exceptions.ConnectionError],
        )

    @staticmethod
    def _seq(entry_id: bytes) -> int:
        return int(entry_id.split(b"-")[1])

    async def _call(self, work: Awaitable[T]) -> T:
        try:
            return await work
        except redis.exceptions.RedisError as exc:
            raise LogFailed(f"the replay log (Redis) failed: {type(exc).__name__}") from exc

    async def open(self, stream_id: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(f"replay:{stream_id}", {"start": 1}, id="1-0")
            pipe.pexpire(f"replay:{stream_id}", self.keep_ms)
            pipe.set(f"seen:{stream_id}", 1, px=self.grace_ms)
            await self._call(pipe.execute())

    async def append(self, stream_id: str, seq: int, event: bytes | None) -> None:
        fields: dict[Any, Any] = {"end": 1} if event is None else {"event": event}
        async with self.redis.pipeline(transaction=False) as pipe:
            key = f"replay:{stream_id}"
            pipe.xadd(key, fields, id=f"1-{seq}", maxlen=self.max_events, approximate=False)
            pipe.pexpire(key, self.keep_ms)
            await self._call(pipe.execute())

    async def read(self, stream_id: str, after: int, wait_s: float) -> list[Entry]:
        key = f"replay:{stream_id}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(f"seen:{stream_id}", 1, px=int(wait_s * 1000) + self.grace_ms)
            pipe.xrange(key, count=1)
            pipe.xrevrange(key, count=1)
            replies: list[Any] = await self._call(pipe.execute())
        _, first, last = replies
        if not first:
            raise NotKept(f"no stream {stream_id} here: it never was, or it ended long ago")
        (first_id, _), (last_id, last_fields) = first[0], last[0]
        last_event = self._seq(last_id) - (b"end" in last_fields)
        _check_cursor(after, max(self._seq(first_id), 1), last_event)
        block = int(wait_s * 1000) or None  # BLOCK 0 would wait for ever
        reply: Any = await self._call(self.redis.xread({key: f"1-{after}"}, count=256, block=block))
        entries = [
            (self._seq(entry_id), fields.get(b"event"))
            for _, batch in reply or []
            for entry_id, fields in batch
        ]
        if entries and entries[0][0] != after + 1:  # trimmed since the check: never skip events
            _check_cursor(after, entries[0][0], entries[-1][0])
        return entries

    async def watched(self, stream_id: str) -> bool:
        return bool(await self._call(self.redis.exists(f"seen:{stream_id}")))

    async def stop(self, stream_id: str) -> bool:
        if not await self._call(self.redis.exists(f"replay:{stream_id}")):
            return False
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lpush(f"stop:{stream_id}", 1)
            pipe.pexpire(f"stop:{stream_id}", self.keep_ms)
            await self._call(pipe.execute())
        return True

    async def stopped(self, stream_id: str) -> None:
        # Short blocking pops: each stays inside the socket timeout, and a Stop ends one at once.
        while not await self._call(self.redis.blpop([f"stop:{stream_id}"], timeout=1)):
            pass

    async def close(self) -> None:
        await self.redis.aclose()


def make_log() -> ReplayLog:
    """The replay log this process uses: Redis's with ``REDIS_URL`` set, else its own."""
    if REDIS_URL:
        return RedisLog(REDIS_URL, REPLAY_EVENTS, REPLAY_KEEP_S, RESUME_GRACE_S)
    return MemoryLog(REPLAY_EVENTS, REPLAY_KEEP_S, RESUME_GRACE_S)


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
        app.state.replay_log = make_log()
        app.state.producers = set()  # the resumable answers running here (15)
        try:
            yield
        finally:
            for producer in app.state.producers:
                producer.cancel()
            await asyncio.gather(*app.state.producers, return_exceptions=True)
            await app.state.replay_log.close()


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A stream the client asked to be resumable (notebook 15) is not sent from the body
        itself: ``produce`` runs the body into a replay log, apart from this connection, and
        the client gets ``follow``'s view of that log, with the answer's id in ``X-Stream-Id``."""
        if asks_to_resume(scope):
            app = scope["app"]
            log, stream_id = app.state.replay_log, secrets.token_urlsafe(16)
            try:
                await log.open(stream_id)
            except LogFailed as exc:  # nothing was sent: refuse, close the upstream, log it
                if self.background is not None:
                    await self.background()
                log_usage(Usage(), "error")
                refusal = JSONResponse(error_body(str(exc), "service_unavailable"), 503)
                return await refusal(scope, receive, send)
            pieces = cast(AsyncGenerator[bytes, None], self.body_iterator)  # relay's
            producer = asyncio.create_task(produce(log, stream_id, pieces))
            app.state.producers.add(producer)
            producer.add_done_callback(app.state.producers.discard)
            self.body_iterator, self.background = follow(log, stream_id, 0), None
            self.headers["X-Stream-Id"] = stream_id
        await super().__call__(scope, receive, send)


def _header(scope: Scope, name: str) -> str | None:
    for key, value in scope["headers"]:
        if key.decode("latin-1").lower() == name:
            return str(value.decode("latin-1"))
    return None


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


_LINE_END = re.compile(rb"\r\n|\r|\n")  # what ends an SSE line, and nothing else


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The upstream body's lines, without their ends, as they arrive. Only CRLF, LF and CR end
    an SSE line. httpx's ``aiter_lines`` splits with ``str.splitlines``, which also ends a line
    at U+2028, U+2029, U+0085 and five control characters; an engine that writes its JSON as
    UTF-8 (llama.cpp does) sends those raw inside a ``data:`` line, which would arrive cut in
    two and the event lost. Splitting the bytes is safe: no byte of a multi-byte UTF-8
    character is a CR or an LF."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        held = pending.endswith(b"\r")  # a CR that may be the first half of a CRLF
        *lines, pending = _LINE_END.split(pending[:-1] if held else pending)
        if held:
            pending += b"\r"
        for line in lines:
            yield line.decode("utf-8", errors="replace")
    if pending:
        yield _LINE_END.split(pending)[0].decode("utf-8", errors="replace")


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
        async for event in sse_events(sse_lines(upstream.aiter_bytes())):
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


def reply_to(
    item: Item | None, usage: Usage, client_wants_usage: bool, quiet_s: float
) -> tuple[bytes | None, str | None]:
    """What the body sends the client for one item of ``next_item`` (None: nothing), and the
    outcome if the answer ends with it (None: it goes on). ``quiet_s`` is how long the client
    has gone without a byte. Given: it joins what later notebooks have you write, each where its
    idea is taught (``pass_on`` in 05, ``error_event`` in 06, heartbeats in 07)."""
    if item is None:  # the upstream has been silent for HEARTBEAT_S (07)
        return HEARTBEAT, None
    if isinstance(item, UpstreamFailed):  # the stream is already a 200: say so in it (06)
        return error_event(item.message), "error"
    send, ending = pass_on(item, usage, client_wants_usage)  # (05)
    if send is None and quiet_s >= HEARTBEAT_S:
        send = HEARTBEAT  # an event we drop is no sign of life to the client (07)
    return send, ending


async def relay(upstream: httpx.Response, client_wants_usage: bool) -> AsyncIterator[bytes]:
    """The response body. A reader task fills a queue (``make_queue``); this drains it
    (``next_item``), sending for each item what ``reply_to`` says, until an item ends the
    answer. However the body ends, stop the reader (at once if the client left) and log the
    usage once."""
    ### BEGIN SOLUTION
    ### STAND-IN: async for piece in upstream.aiter_bytes():
    ### STAND-IN:     yield piece
    queue = make_queue()
    reader = asyncio.create_task(read_events(upstream, queue))
    usage = Usage()
    outcome = "cancelled"  # stays so if the client leaves: Starlette cancels us at an await
    clock = asyncio.get_running_loop().time
    sent_at = clock()  # when the client last got a byte
    try:
        while True:
            item = await next_item(queue)
            send, ending = reply_to(item, usage, client_wants_usage, clock() - sent_at)
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
            # connection back in its pool (cancelling that read makes httpx close it, and the
            # next request pays for a new one), but not for ever.
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


# ---------------------------------------------------------------------------------------------
# 15 · Resumable streams: a drop is not a Stop


def asks_to_resume(scope: Scope) -> bool:
    """Whether a request asked for a resumable stream: a POST with ``X-Resumable: true``
    (``StreamingResponse.__call__`` asks). Until this section is written, none does."""
    ### BEGIN SOLUTION
    ### STAND-IN: return False
    return scope["method"] == "POST" and _header(scope, RESUMABLE_HEADER) == "true"
    ### END SOLUTION


async def produce(log: ReplayLog, stream_id: str, pieces: AsyncGenerator[bytes, None]) -> None:
    """Run one resumable answer, apart from any client's connection: append each piece of
    ``pieces`` (``relay``'s body) to the log as event 1, 2, 3, ... (not comments or heartbeats:
    every follower sends its own), and the end (``None``) last, however the answer ends. Stop it
    at once when somebody asks the log to stop it, and when nobody has read it for the grace
    period (``log.watched``, asked every ``WATCH_S``). Stopping closes ``pieces``: ``relay``
    then closes the upstream and logs the usage, once, as ``cancelled``."""
    ### BEGIN SOLUTION
    seq = 0

    async def copy() -> None:
        nonlocal seq
        async with aclosing(pieces):  # however copying ends, relay's finally runs now
            async for piece in pieces:
                if not piece.startswith(b":"):
                    seq += 1
                    await log.append(stream_id, seq, piece)

    copying = asyncio.create_task(copy())
    stop_asked = asyncio.create_task(log.stopped(stream_id))
    failed: BaseException | None = None
    try:
        while not copying.done():
            await asyncio.wait(
                (copying, stop_asked), timeout=WATCH_S, return_when=asyncio.FIRST_COMPLETED
            )
            if not copying.done() and (stop_asked.done() or not await log.watched(stream_id)):
                break
    except LogFailed as exc:
        failed = exc
    finally:
        # Cancelled until done: a cancel can be lost (on Python 3.11 redis-py sends each command
        # inside asyncio.wait_for, which drops a cancel that lands as the send completes).
        for task in (stop_asked, copying):  # copying: nothing to do if the answer is over
            while not task.done():
                task.cancel()
                await asyncio.wait((task,), timeout=WATCH_S)
            if not task.cancelled() and task.exception() is not None:
                failed = task.exception()  # the log failed under it: the answer was cut
        with suppress(LogFailed):
            if failed is not None:  # a bare end would pass for the whole answer: say so
                seq += 1
                await log.append(stream_id, seq, error_event(f"the answer was cut: {failed}"))
            await log.append(stream_id, seq + 1, None)
    ### END SOLUTION


async def follow(log: ReplayLog, stream_id: str, after: int) -> AsyncIterator[bytes]:
    """One client's view of a resumable answer: every logged event after ``after``, each with
    its sequence number as its ``id:``, then the live ones as they come, until the end. A
    heartbeat when nothing came for ``HEARTBEAT_S``; an error event, then the end, when the log
    no longer has what was asked for or cannot be reached."""
    ### BEGIN SOLUTION
    cursor = after
    while True:
        try:
            entries = await log.read(stream_id, cursor, HEARTBEAT_S)
        except (NotKept, LogFailed) as exc:
            yield error_event(str(exc))
            return
        if not entries:
            yield HEARTBEAT
        for seq, event in entries:
            if event is None:
                return
            yield f"id: {seq}\n".encode() + event
            cursor = seq
    ### END SOLUTION


@app.get(STREAMS_PATH + "/{stream_id}")
async def resume_stream(request: Request, stream_id: str) -> Response:
    """A client back for a resumable answer: the events after its cursor (the ``Last-Event-ID``
    header, or ``?after=N``), then the live ones. 404 for an answer the log does not have (or
    a cursor it no longer keeps), 400 for a cursor that is not a number, 503 without the log."""
    ### BEGIN SOLUTION
    cursor = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not cursor.isdigit():
        return bad_request(f"the cursor must be an event id (a number), not {cursor!r}")
    log: ReplayLog = request.app.state.replay_log
    try:
        await log.read(stream_id, int(cursor), 0)
    except NotKept as exc:
        return JSONResponse(error_body(str(exc), "not_found_error"), 404)
    except LogFailed as exc:
        return JSONResponse(error_body(str(exc), "service_unavailable"), 503)
    return StarletteStreamingResponse(
        follow(log, stream_id, int(cursor)),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, "X-Stream-Id": stream_id},
    )
    ### END SOLUTION


@app.post(STREAMS_PATH + "/{stream_id}/cancel")
async def stop_stream(request: Request, stream_id: str) -> Response:
    """Stop: the answer's upstream is cancelled at once, whichever replica runs it. 404 for an
    answer the log does not have, 503 without the log."""
    ### BEGIN SOLUTION
    log: ReplayLog = request.app.state.replay_log
    try:
        found = await log.stop(stream_id)
    except LogFailed as exc:
        return JSONResponse(error_body(str(exc), "service_unavailable"), 503)
    if not found:
        return JSONResponse(error_body(f"no stream {stream_id} here", "not_found_error"), 404)
    return JSONResponse({"id": stream_id, "object": "stream", "status": "cancelled"})
    ### END SOLUTION
