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

Parsing happens after the timestamp is taken, so it cannot skew the numbers. This module is the
HTTP driver; the data model (``_capture_model``), the decompressor (``_decompress``), the
recorder that builds a capture from chunks (``_recorder``), the shared SSL context (``_ssl``)
and the blocking bridge (``_blocking``) have modules of their own.

``capture_stream`` (blocking) runs the same code as ``acapture_stream`` on a private event loop
in a helper thread, so it also works inside a Jupyter kernel, whose own loop is already running.
A capture can hang up on purpose (``disconnect_after_events`` / ``disconnect_after_s``: it
closes the connection, which is how the notebooks prove cancellation) or read slowly
(``read_interval_s``: it sleeps between socket reads with a small receive buffer, so TCP
backpressure really reaches the server).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from typing import Any

import anyio
import httpx

from labkit._blocking import run_blocking
from labkit._capture_model import Capture, Chunk, Comment, Event
from labkit._recorder import Recorder
from labkit._ssl import shared_ssl_context
from labkit.errors import CaptureError

__all__ = [
    "DEFAULT_CAPTURE_TIMEOUT",
    "SLOW_READER_RCVBUF",
    "Capture",
    "Chunk",
    "Comment",
    "Event",
    "acapture_stream",
    "capture_stream",
    "shared_ssl_context",
]

DEFAULT_CAPTURE_TIMEOUT = 60.0
#: Receive buffer (bytes) asked for by a slow reader, so each read takes little off the socket.
SLOW_READER_RCVBUF = 32_768  # smaller stalls loopback TCP on window-update timers
_DEFAULT_ACCEPT_ENCODING = "gzip, deflate"  # what we can decode ourselves, chunk by chunk


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
    recorder = Recorder(capture)
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
    return run_blocking(
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
