"""Capture one streamed HTTP response with the arrival time of every byte.

The evidence behind every timing claim in the lab. A capture records, in this order:

1. each raw chunk as it comes off the socket (``response.aiter_raw()``: no decoding) with the
   time since the request was sent: ``.chunks``;
2. then, decoded from those bytes (gunzipped first if the response is gzip-encoded, so the
   chunks show when the *compressed* bytes arrived), the SSE events and comment lines, each
   stamped with the arrival time of the chunk that completed it: ``.events``, ``.comments``;
3. then what the events mean (``labkit.wire``): the times of the content events, TTFT, text,
   usage and how the stream ended (``.terminal``).

A *content event* is one SSE event that carries text; it may carry several tokens, so counting
events is not counting tokens. ``.content_events`` counts events; ``.token_counts`` and
``.tokens_received`` count tokens, with the mock upstream's tokenizer over the text received
(exact for the mock's own answers, which split into whole tokens at every event; for another
server's text it is an estimate). Compare tokens with the mock's ``tokens_generated``, events
with events.

*First useful content* (``.first_useful_content``) is the arrival of the first content event
that a reader can use (``labkit.wire``: text with a letter or digit, tool-call arguments, a
refusal); a stream that opens with blank filler has a TTFT that flatters it, and the gap between
the two is the filler. Through the lab's stream gateway, whose content events are the fragments
its release policy let out, it is the time to the first released sentence.

Parsing happens after the timestamp is taken, so it cannot skew the numbers.

``capture_stream`` (blocking) runs the same code as ``acapture_stream`` on a private event loop
in a helper thread, so it also works inside a Jupyter kernel, whose own loop is already running.
A capture can hang up on purpose (``disconnect_after_events`` / ``disconnect_after_s``: it
closes the connection, which is how the notebooks prove cancellation) or read slowly
(``read_interval_s``: it sleeps between socket reads with a small receive buffer, so TCP
backpressure really reaches the server).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import itertools
import json as jsonlib
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx

from labkit.errors import CaptureError
from labkit.sse import SSEComment, SSEDecoder
from labkit.wire import Terminal, interpret_body, interpret_event
from mock_upstream.tokenizer import count_tokens

__all__ = [
    "DEFAULT_CAPTURE_TIMEOUT",
    "SLOW_READER_RCVBUF",
    "Capture",
    "Chunk",
    "Comment",
    "Event",
    "acapture_stream",
    "capture_stream",
]

DEFAULT_CAPTURE_TIMEOUT = 60.0
#: Receive buffer (bytes) asked for by a slow reader, so each read takes little off the socket.
SLOW_READER_RCVBUF = 32_768  # smaller stalls loopback TCP on window-update timers
_DEFAULT_ACCEPT_ENCODING = "gzip, deflate"  # what we can decode ourselves, chunk by chunk

T = TypeVar("T")


@dataclass(frozen=True)
class Chunk:
    """Raw bytes as read off the socket, ``t`` seconds after the request was sent."""

    t: float
    data: bytes


@dataclass(frozen=True)
class Event:
    """One SSE event, stamped with the arrival time of the chunk that completed it."""

    t: float
    event: str
    data: str
    id: str | None = None
    token: bool = False
    useful: bool = False

    def json(self) -> Any:
        """The event's data parsed as JSON (raises ``ValueError`` for ``[DONE]`` and the like)."""
        return jsonlib.loads(self.data)


@dataclass(frozen=True)
class Comment:
    """One SSE comment line (``: keep-alive``) and its arrival time."""

    t: float
    text: str


@dataclass
class Capture:
    """Everything one streamed request showed. Times are seconds since the request was sent."""

    url: str
    method: str = "POST"
    started_at: float = 0.0
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    headers_at: float | None = None
    chunks: list[Chunk] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    text: str = ""
    usage: dict[str, Any] | None = None
    terminal: Terminal = "truncated"
    error: Any = None
    transport_error: str | None = None
    malformed_events: int = 0
    total_time: float = 0.0
    disconnected_at: float | None = None
    body: builtins.bytes = b""

    @property
    def ttft(self) -> float | None:
        """Time to first token: arrival of the first content-carrying event (None if none)."""
        return self.token_times[0] if self.token_times else None

    @property
    def first_useful_content(self) -> float | None:
        """Time to the first content event a reader can use (None if none came): see the
        module docstring. Never earlier than ``ttft``."""
        return next((e.t for e in self.events if e.useful), None)

    @property
    def gaps(self) -> list[float]:
        """Seconds between consecutive content events."""
        times = self.token_times
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def chunk_gaps(self) -> list[float]:
        """Seconds between consecutive raw chunks (any bytes, heartbeats included)."""
        times = [c.t for c in self.chunks]
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def bytes(self) -> int:
        """Bytes received on the wire (compressed, if the response was)."""
        return sum(len(c.data) for c in self.chunks)

    @property
    def content_events(self) -> int:
        """How many content events (events that carry text) arrived; one may hold many tokens."""
        return len(self.token_times)

    @property
    def tokens_received(self) -> int:
        """Tokens in the text received, by the mock's tokenizer (see the module docstring)."""
        return self.token_counts[-1] if self.token_counts else 0

    def __repr__(self) -> str:
        ttft = "-" if self.ttft is None else f"{self.ttft:.3f} s"
        return (
            f"<Capture {self.status} {self.terminal}: {self.content_events} content events "
            f"({self.tokens_received} tokens), "
            f"ttft {ttft}, total {self.total_time:.3f} s, {self.bytes} bytes>"
        )


class _Decompressor:
    """Undo Content-Encoding incrementally, so each raw chunk's bytes decode when they arrive."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        self._zlib: Any = None
        if encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(wbits=31)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj(wbits=47)  # zlib or gzip header, auto-detected
        self._raw_deflate = encoding == "deflate"

    def decode(self, data: bytes) -> bytes:
        if self._zlib is None:
            return data
        try:
            out: bytes = self._zlib.decompress(data)
        except zlib.error:
            if not self._raw_deflate:
                raise
            self._zlib = zlib.decompressobj(wbits=-15)  # headerless deflate
            self._raw_deflate = False
            out = self._zlib.decompress(data)
        return out

    def flush(self) -> bytes:
        return b"" if self._zlib is None else bytes(self._zlib.flush())


class _Recorder:
    """Builds a Capture from timestamped raw chunks."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.t0 = 0.0
        self._decoder = SSEDecoder()
        self._decompressor = _Decompressor("")
        self._body = bytearray()
        self._sse = True
        self._usage: dict[str, Any] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def start(self) -> None:
        self.capture.started_at = time.time()
        self.t0 = time.perf_counter()

    def on_response(self, response: httpx.Response) -> None:
        cap = self.capture
        cap.headers_at = self.now()
        cap.status = response.status_code
        cap.headers = {key: response.headers[key] for key in response.headers}  # repeats joined
        self._decompressor = _Decompressor(response.headers.get("content-encoding", ""))
        content_type = response.headers.get("content-type", "")
        self._sse = response.is_success and not content_type.startswith("application/json")

    def on_chunk(self, t: float, data: bytes) -> None:
        self.capture.chunks.append(Chunk(t, data))
        self._feed(t, self._decompressor.decode(data))

    def _feed(self, t: float, data: bytes) -> None:
        cap = self.capture
        self._body += data
        if not self._sse:
            return
        for item in self._decoder.decode(data):
            if isinstance(item, SSEComment):
                cap.comments.append(Comment(t, item.text))
                continue
            meaning = interpret_event(item.event, item.data)
            cap.events.append(
                Event(t, item.event, item.data, item.id, meaning.token, meaning.useful)
            )
            if meaning.token:
                cap.token_times.append(t)
                cap.token_counts.append(cap.tokens_received + count_tokens(meaning.text))
                cap.text += meaning.text
            if meaning.usage:
                self._usage.update(meaning.usage)
                cap.usage = dict(self._usage)
            if meaning.malformed:
                cap.malformed_events += 1
            if meaning.terminal is not None and cap.terminal == "truncated":
                cap.terminal = meaning.terminal
                if meaning.error is not None:
                    cap.error = meaning.error

    def finish(self, t: float, *, disconnected: bool = False) -> Capture:
        cap = self.capture
        try:
            tail = self._decompressor.flush()
        except zlib.error as exc:
            cap.transport_error = cap.transport_error or f"bad compressed body: {exc}"
            tail = b""
        if tail:
            self._feed(t, tail)
        cap.total_time = t
        cap.body = bytes(self._body)
        if disconnected and cap.terminal == "truncated":
            cap.terminal = "disconnected"
            cap.disconnected_at = t
        if cap.status is not None and not self._sse:
            self._finish_unary(cap)
        return cap

    def _finish_unary(self, cap: Capture) -> None:
        try:
            body: Any = jsonlib.loads(cap.body)
        except ValueError:
            body = cap.body.decode("utf-8", errors="replace")
        if cap.status is not None and cap.status >= 400:
            cap.terminal = "error"
            cap.error = body.get("error", body) if isinstance(body, dict) else body
            return
        meaning = interpret_body(body)
        cap.text = meaning.text
        cap.usage = meaning.usage
        if cap.terminal == "truncated" and cap.transport_error is None:
            cap.terminal = meaning.terminal or "done"
            cap.error = meaning.error


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One verifying SSL context for every request (building one costs ~30 ms of CPU)."""
    return httpx.create_ssl_context()


def _transport(read_interval_s: float | None) -> httpx.AsyncHTTPTransport:
    if read_interval_s is None:
        return httpx.AsyncHTTPTransport(verify=shared_ssl_context())
    return httpx.AsyncHTTPTransport(
        verify=shared_ssl_context(),
        socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)],
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def acapture_stream(
    url: str,
    *,
    json: Any = None,
    headers: Mapping[str, str] | None = None,
    method: str = "POST",
    disconnect_after_events: int | None = None,
    disconnect_after_s: float | None = None,
    read_interval_s: float | None = None,
    timeout: float = DEFAULT_CAPTURE_TIMEOUT,  # noqa: ASYNC109 (the HTTP timeout, per read)
) -> Capture:
    """Send one request and record its response as it streams in (see the module docstring).

    ``disconnect_after_events=N`` closes the connection as soon as N content events have
    arrived (0: right after the response headers); ``disconnect_after_s=T`` closes
    it T seconds after the request was sent, even while still waiting for headers.
    ``read_interval_s`` sleeps that long between socket reads. ``timeout`` applies to connect
    and to each read. Raises ``CaptureError`` only when no response arrived at all; a stream
    that breaks midway is recorded (``terminal="truncated"``, ``transport_error``).
    """
    capture = Capture(url=url, method=method.upper())
    recorder = _Recorder(capture)
    request_headers = httpx.Headers({"accept-encoding": _DEFAULT_ACCEPT_ENCODING})
    request_headers.update(dict(headers or {}))
    disconnected = False
    async with httpx.AsyncClient(
        transport=_transport(read_interval_s), timeout=httpx.Timeout(timeout)
    ) as client:
        recorder.start()
        deadline = None if disconnect_after_s is None else disconnect_after_s
        with anyio.move_on_after(deadline) as scope:
            try:
                async with client.stream(
                    method, url, json=json, headers=request_headers
                ) as response:
                    recorder.on_response(response)
                    if disconnect_after_events == 0:
                        disconnected = True
                    else:
                        async for data in response.aiter_raw():
                            recorder.on_chunk(recorder.now(), data)
                            if (
                                disconnect_after_events is not None
                                and capture.content_events >= disconnect_after_events
                            ):
                                disconnected = True
                                break
                            if read_interval_s:
                                await asyncio.sleep(read_interval_s)
            except httpx.TransportError as exc:
                if capture.status is None:
                    raise CaptureError(url=url, error=_describe(exc)) from None
                capture.transport_error = _describe(exc)
        if scope.cancelled_caught:
            disconnected = True
    return recorder.finish(recorder.now(), disconnected=disconnected)


def capture_stream(
    url: str,
    *,
    json: Any = None,
    headers: Mapping[str, str] | None = None,
    method: str = "POST",
    disconnect_after_events: int | None = None,
    disconnect_after_s: float | None = None,
    read_interval_s: float | None = None,
    timeout: float = DEFAULT_CAPTURE_TIMEOUT,
) -> Capture:
    """Blocking ``acapture_stream``; safe to call inside a Jupyter kernel."""
    return _run_blocking(
        acapture_stream(
            url,
            json=json,
            headers=headers,
            method=method,
            disconnect_after_events=disconnect_after_events,
            disconnect_after_s=disconnect_after_s,
            read_interval_s=read_interval_s,
            timeout=timeout,
        )
    )


def _run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop in a helper thread."""
    result: list[T] = []
    error: list[BaseException] = []
    loop = asyncio.new_event_loop()
    task_ready = threading.Event()
    task_box: list[asyncio.Task[T]] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            task = loop.create_task(coro)
            task_box.append(task)
            task_ready.set()
            result.append(loop.run_until_complete(task))
        except BaseException as exc:
            error.append(exc)
        finally:
            task_ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    thread = threading.Thread(target=run, name="labkit:capture", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        task_ready.wait()
        if task_box and not loop.is_closed():
            loop.call_soon_threadsafe(task_box[0].cancel)
        thread.join()
        raise
    if error:
        raise error[0]
    return result[0]
