"""Behaviour of the pinned libraries that a lesson depends on.

If one of these fails after an upgrade, the lesson that cites it is wrong: fix the lesson,
then the pin. A comment at the top of each test names the lesson that relies on the fact.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from labkit import serve, start_nginx
from mock_upstream import create_app


def test_httpx_default_timeout_is_five_seconds_for_every_phase() -> None:
    # Lesson 07: a proxy built on a bare AsyncClient() kills a first token slower than 5 s.
    timeout = httpx.AsyncClient().timeout
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (5.0, 5.0, 5.0, 5.0)


def test_zlib_holds_small_writes_until_a_sync_flush() -> None:
    # Lesson 03: a gzip layer that never flushes turns a stream into one burst at the end.
    compressor = zlib.compressobj(wbits=31)
    header = compressor.compress(b'data: {"delta": "Hello"}\n\n')
    held = compressor.compress(b'data: {"delta": " world"}\n\n')
    flushed = compressor.flush(zlib.Z_SYNC_FLUSH)
    assert len(header) <= 10  # at most the gzip header: no event has left the compressor
    assert held == b""
    decoded = zlib.decompressobj(wbits=31).decompress(header + held + flushed)
    assert decoded == b'data: {"delta": "Hello"}\n\ndata: {"delta": " world"}\n\n'


@pytest.mark.parametrize(("keepalive", "kept"), [(2, 4), (10, 5)])
@pytest.mark.sockets
def test_httpx_pool_closes_a_finished_connection_once_it_holds_more_than_the_keepalive_count(
    keepalive: int, kept: int
) -> None:
    # docs/connection-pool.md and the README's benchmark notes: httpcore 1.0.9 compares *all* its
    # connections, not the idle ones, with max_keepalive_connections (encode/httpcore#1035). A
    # proxy holding more streams than that count closes each upstream connection as its stream
    # ends (one idle connection is within a keep-alive count of 2, yet it is closed), and every
    # new stream opens a new TCP connection. With a count above the streams it is kept.
    body = {"model": "m", "stream": True, "mock": {"ttft_ms": 0, "tps": 50, "tokens": 50}}
    with serve(create_app(), name="pinned-pool-mock") as mock:

        async def connections_before_and_after_one_of_five_streams_ends() -> tuple[int, int]:
            limits = httpx.Limits(max_connections=10, max_keepalive_connections=keepalive)
            async with httpx.AsyncClient(base_url=mock.url, limits=limits) as client:
                request = client.build_request("POST", "/v1/chat/completions", json=body)
                responses = [await client.send(request, stream=True) for _ in range(5)]
                pool = client._transport._pool  # type: ignore[attr-defined]
                before = len(pool.connections)
                await responses[0].aread()  # the first stream ends: its connection is idle
                await responses[0].aclose()
                after = len(pool.connections)
                for response in responses[1:]:
                    await response.aclose()
                return before, after

        counts = asyncio.run(connections_before_and_after_one_of_five_streams_ends())
    assert counts == (5, kept)


@pytest.mark.sockets
def test_httpx_pool_hands_one_idle_connection_to_every_request_waiting_for_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/known-limits.md, "httpx's pool makes streams wait for seconds under churn": httpcore
    # 1.0.9 assigns an idle connection to every request queued in one pass of its pool, and the
    # connection stays idle until the first of them sends on it, so each of the others gets
    # ConnectionNotAvailable and passes over the whole pool again. At 100 steady streams that
    # storm held new streams for 3 to 7 s before any byte went upstream (docs/measurements.md,
    # "The relay's floor on its own libraries, and the pool's storm"). httpcore2 (httpx2) keeps
    # an assigned idle connection for its request; when this fails after an upgrade, the
    # reference's pool no longer storms: measure the relay again.
    from httpcore._async.connection_pool import AsyncPoolRequest

    retries: list[object] = []
    clear = AsyncPoolRequest.clear_connection

    def counted(self: AsyncPoolRequest) -> None:
        retries.append(self)
        clear(self)

    monkeypatch.setattr(AsyncPoolRequest, "clear_connection", counted)
    body = {"model": "m", "stream": True, "mock": {"ttft_ms": 0, "tps": 1000, "tokens": 2}}
    with serve(create_app(), name="pinned-pool-storm-mock") as mock:

        async def four_requests_beside_one_idle_connection() -> int:
            async with httpx.AsyncClient(base_url=mock.url) as client:
                request = client.build_request("POST", "/v1/chat/completions", json=body)
                first = await client.send(request, stream=True)
                await first.aread()  # its connection is idle in the pool now
                await first.aclose()
                responses = await asyncio.gather(
                    *(client.send(request, stream=True) for _ in range(4))
                )
                open_now = len(client._transport._pool.connections)  # type: ignore[attr-defined]
                for response in responses:
                    await response.aclose()
                return open_now

        connections = asyncio.run(four_requests_beside_one_idle_connection())
    assert connections == 4  # the idle one and three new: every request got one in the end
    assert len(retries) >= 1, "no request was sent back to the pool: the storm is gone"


def _frames(count: int) -> list[bytes]:
    """SSE frames like a chat stream's: the same envelope around a word that changes."""
    words = ["the", "proxy", "passes", "a", "quiet", "heartbeat", "on", "each", "new", "line"]
    return [
        b'data: {"choices": [{"delta": {"content": " %s"}}]}\n\n' % words[(7 * n) % 10].encode()
        for n in range(count)
    ]


def _chat(scenario: dict[str, int]) -> dict[str, object]:
    """A streamed chat request to the mock, paced by ``scenario``."""
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "m", "messages": messages, "stream": True, "mock": scenario}


def test_a_sync_flush_keeps_the_window_and_a_full_flush_resets_it() -> None:
    # Lesson 03: Z_SYNC_FLUSH does not stop deflate from finding repeats across the boundary;
    # what it costs is the block it ends and the empty stored block (00 00 ff ff) it adds.
    # Z_FULL_FLUSH also forgets the window, and every frame is coded from scratch.
    def sizes(mode: int) -> list[int]:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        return [len(compressor.compress(f) + compressor.flush(mode)) for f in _frames(20)]

    synced, full = sizes(zlib.Z_SYNC_FLUSH), sizes(zlib.Z_FULL_FLUSH)
    frame = len(_frames(1)[0])
    assert max(synced[1:]) < frame / 2  # later frames refer back to earlier ones
    assert min(full[1:]) > frame * 3 / 4  # nothing to refer back to
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    compressor.compress(_frames(1)[0])
    assert compressor.flush(zlib.Z_SYNC_FLUSH).endswith(b"\x00\x00\xff\xff")


@pytest.mark.parametrize(
    ("mem_level", "window_bits", "emits"), [(8, 31, False), (8, 25, False), (1, 31, True)]
)
def test_deflate_emits_a_block_when_its_symbol_buffer_fills_not_its_window(
    mem_level: int, window_bits: int, emits: bool
) -> None:
    # Lesson 03, exercise 4: 3,000 repetitive frames (165 KB) leave deflate's default
    # compressor without a byte past the gzip header, although they are five times its 32 KB
    # window (and 300 times a 512-byte one): each frame is a few symbols (matches), and a block
    # goes out only when the buffer of symbols (16,384 at memLevel 8, 128 at memLevel 1) fills.
    compressor = zlib.compressobj(6, zlib.DEFLATED, window_bits, mem_level)
    out = b"".join(compressor.compress(frame) for frame in _frames(3000))
    assert (len(out) > 10) is emits


@pytest.mark.sockets
def test_httpcore_closes_a_connection_whose_body_read_was_cancelled() -> None:
    # Lesson 04, relay's `finally`: a reader cancelled mid-body leaks no connection. httpcore
    # 1.0.9 closes it (h11 is not done with the response, so it cannot be reused) and drops it
    # from the pool; a body read to its end leaves its connection idle in the pool instead.
    body = _chat({"ttft_ms": 0, "tps": 10, "tokens": 20})
    with serve(create_app(), name="pinned-cancelled-read-mock") as mock:

        async def pool_after(cancel: bool) -> list[str]:
            async with httpx.AsyncClient(base_url=mock.url) as client:
                request = client.build_request("POST", "/v1/chat/completions", json=body)
                response = await client.send(request, stream=True)

                async def read() -> None:
                    try:
                        async for _ in response.aiter_lines():
                            pass
                    finally:
                        await response.aclose()

                reader = asyncio.create_task(read())
                if cancel:
                    await asyncio.sleep(0.3)
                    reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                pool = client._transport._pool  # type: ignore[attr-defined]
                return [repr(connection) for connection in pool.connections]

        assert asyncio.run(pool_after(cancel=True)) == []
        (kept,) = asyncio.run(pool_after(cancel=False))
        assert "IDLE" in kept


@pytest.mark.sockets
def test_httpx_read_timeout_is_a_limit_per_read_not_per_response() -> None:
    # Lesson 07: `read` is the longest wait for the next bytes. A body that trickles outlives it
    # by far; a silent one ends one read timeout after its last bytes (its headers here).
    trickle = {"ttft_ms": 0, "tps": 5, "tokens": 6}  # a token every 0.2 s, 1.2 s in all
    silent = {"ttft_ms": 3000, "tps": 5, "tokens": 2}
    timeout = httpx.Timeout(5.0, read=0.5)
    with serve(create_app(), name="pinned-read-timeout-mock") as mock:
        with httpx.Client(base_url=mock.url, timeout=timeout) as client:
            started = time.monotonic()
            with client.stream("POST", "/v1/chat/completions", json=_chat(trickle)) as response:
                lines = list(response.iter_lines())
            assert "data: [DONE]" in lines
            assert time.monotonic() - started > 1.0  # twice the read timeout, no ReadTimeout
            with client.stream("POST", "/v1/chat/completions", json=_chat(silent)) as response:
                headers_at = time.monotonic()
                with pytest.raises(httpx.ReadTimeout):
                    response.read()
            assert 0.45 < time.monotonic() - headers_at < 1.5


def test_starlette_testclient_hands_over_pieces_as_the_app_yields_them() -> None:
    # Lesson 02: since Starlette 1.9 (the lab pins 1.10) `TestClient.stream()` returns before the
    # app has finished, and each piece comes as the app yields it; before 1.9 it collected the
    # whole body first. In-process all the same: no socket, no kernel buffers.
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def pieces() -> AsyncIterator[bytes]:
        yield b"first"
        await asyncio.sleep(1.0)
        yield b"second"

    async def route(request: object) -> StreamingResponse:
        return StreamingResponse(pieces())

    with TestClient(Starlette(routes=[Route("/", route)])) as client:
        started = time.monotonic()
        with client.stream("GET", "/") as response:
            chunks = response.iter_bytes()
            assert next(chunks) == b"first"
            first_at = time.monotonic() - started
            assert b"".join(chunks) == b"second"
        assert first_at < 0.5 < time.monotonic() - started


needs_nginx = pytest.mark.skipif(
    shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
    reason="nginx is not installed",
)


class _RawUpstream:
    """A loopback HTTP server that writes ``answer(request_line)`` and closes the connection, and
    remembers each request's ``Connection`` header and the client port it came from."""

    def __init__(self, answer: Callable[[str], bytes]) -> None:
        self.answer = answer
        self.seen: list[tuple[int, str | None]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, (_, port) = self.listener.accept()
            except OSError:
                return
            with connection:
                head = connection.recv(65536).decode("latin-1")
                lines = head.split("\r\n")
                fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                self.seen.append((port, fields.get("Connection")))
                connection.sendall(self.answer(lines[0]))
                time.sleep(0.1)

    def close(self) -> None:
        self.listener.close()


@needs_nginx
@pytest.mark.sockets
@pytest.mark.parametrize(
    "directives",
    ["proxy_http_version 1.1;", 'proxy_http_version 1.1; proxy_set_header Connection "";'],
)
def test_nginx_keeps_no_upstream_connection_alive_without_an_upstream_keepalive(
    directives: str,
) -> None:
    # Lesson 13: `proxy_http_version 1.1` alone still sends `Connection: close` to the upstream,
    # and even with that header cleared, a `proxy_pass` to an address (no `upstream` block with
    # `keepalive`) opens a new connection per request.
    upstream = _RawUpstream(lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    edge = start_nginx(
        f"location / {{ proxy_pass {upstream.url}; {directives} }}", name="pinned-nginx-keepalive"
    )
    try:
        for _ in range(3):
            assert httpx.get(edge.url + "/", timeout=5).text == "ok"
    finally:
        edge.stop()
        upstream.close()
    ports = {port for port, _ in upstream.seen}
    assert len(ports) == 3  # three requests, three connections
    if "Connection" not in directives:
        assert {header for _, header in upstream.seen} == {"close"}


@needs_nginx
@pytest.mark.sockets
@pytest.mark.parametrize(("version", "cut_shows"), [("1.0", False), ("1.1", True)])
def test_nginx_tells_a_cut_upstream_body_from_an_end_only_over_http_1_1(
    version: str, cut_shows: bool
) -> None:
    # Lesson 13, why the streaming location speaks HTTP/1.1 to the proxy: over HTTP/1.0 the
    # body ends when the connection closes, so a proxy that dies mid-answer reaches the client
    # as a complete response; over HTTP/1.1 the chunked body lacks its last chunk, nginx logs
    # "upstream prematurely closed connection" and cuts the client's response too.
    def answer(request_line: str) -> bytes:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        if request_line.endswith("HTTP/1.1"):
            return head + b"Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n"
        return head + b"\r\ndata: 1\n\n"

    upstream = _RawUpstream(answer)
    edge = start_nginx(
        f"location / {{ proxy_pass {upstream.url}; proxy_http_version {version}; "
        "proxy_buffering off; }",
        name="pinned-nginx-cut",
    )
    try:
        with httpx.Client(timeout=5) as client:
            try:
                body = client.get(edge.url + "/").text
            except httpx.RemoteProtocolError:
                body = None
    finally:
        edge.stop()
        upstream.close()
    assert (body is None) is cut_shows
    if not cut_shows:
        assert body == "data: 1\n\n"  # the cut looks like a finished answer


def test_httpx_aiter_lines_ends_a_line_where_sse_does_not() -> None:
    """Notebook 04 and ``solutions.proxy.sse_lines``: httpx 0.28 splits lines with
    ``str.splitlines``, so a raw U+2028 inside a ``data:`` line (as llama.cpp writes UTF-8 JSON)
    cuts it in two; SSE ends a line only at CR, LF and CRLF."""
    body = 'data: {"c": "a\u2028b"}\n\n'.encode()
    lines = list(httpx.Response(200, content=body).iter_lines())
    assert lines == ['data: {"c": "a', 'b"}', ""]
