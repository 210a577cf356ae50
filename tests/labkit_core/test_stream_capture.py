"""capture_stream / acapture_stream over real sockets."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import AsyncIterator, Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from labkit_core_support import INTERVAL_S, TOKENS, chat_frame

from labkit import Capture, CaptureError, ThreadServer, acapture_stream, capture_stream, serve

pytestmark = pytest.mark.sockets


def wait_for(predicate: object, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_trickling_and_buffered_streams_differ_by_a_wide_margin(
    stream_server: ThreadServer,
) -> None:
    # A tenth of a second between tokens: the buffered first token comes 1.1 s in, more than
    # ten times what a busy machine has taken to answer the trickle's first (60 ms seen).
    interval = 0.1
    trickle = capture_stream(f"{stream_server.url}/trickle?interval={interval}")
    buffered = capture_stream(f"{stream_server.url}/buffered?interval={interval}")
    for capture in (trickle, buffered):
        assert capture.status == 200
        assert capture.terminal == "done"
        assert capture.content_events == TOKENS
        assert capture.text == "".join(f"t{i} " for i in range(TOKENS))
    assert trickle.ttft is not None and buffered.ttft is not None
    # Trickle: first token at once. Buffered: only once all of them are ready.
    assert buffered.ttft > 10 * trickle.ttft
    assert max(buffered.gaps) < 0.01  # everything arrived at once
    assert min(trickle.gaps) > interval / 2
    assert trickle.total_time == pytest.approx(buffered.total_time, abs=0.2)


def test_every_chunk_and_event_is_timestamped_in_order(stream_server: ThreadServer) -> None:
    capture = capture_stream(f"{stream_server.url}/trickle?n=4")
    times = [chunk.t for chunk in capture.chunks]
    assert times == sorted(times)
    assert capture.bytes == sum(len(chunk.data) for chunk in capture.chunks)
    assert [e.t for e in capture.events if e.token] == capture.token_times
    assert capture.events[-1].data == "[DONE]"
    assert capture.events[0].json()["choices"][0]["delta"]["content"] == "t0 "
    assert capture.headers["content-type"].startswith("text/event-stream")
    assert capture.headers_at is not None and capture.headers_at <= capture.token_times[0]
    assert capture.total_time >= capture.token_times[-1]


def test_disconnect_after_n_events_closes_the_connection(stream_server: ThreadServer) -> None:
    capture = capture_stream(f"{stream_server.url}/trickle?n=50", disconnect_after_events=3)
    assert capture.terminal == "disconnected"
    assert capture.content_events == 3
    assert capture.disconnected_at is not None
    assert capture.disconnected_at < 50 * INTERVAL_S / 2
    outcomes = stream_server.app.state.outcomes
    wait_for(lambda: outcomes == ["cancelled"])


def test_disconnect_after_seconds_also_works_before_the_first_byte(
    stream_server: ThreadServer,
) -> None:
    # /buffered sends nothing for n * interval = 2 s; we hang up after 0.2 s.
    capture = capture_stream(f"{stream_server.url}/buffered?n=50", disconnect_after_s=0.2)
    assert capture.terminal == "disconnected"
    assert capture.content_events == 0
    assert capture.disconnected_at == pytest.approx(0.2, abs=0.15)
    wait_for(lambda: stream_server.app.state.outcomes == ["cancelled"])


def test_disconnect_while_waiting_for_response_headers() -> None:
    app = FastAPI()

    @app.post("/slow-headers")
    async def slow_headers() -> JSONResponse:
        await asyncio.sleep(1.0)
        return JSONResponse({})

    with serve(app) as server:
        began = time.monotonic()
        capture = capture_stream(f"{server.url}/slow-headers", disconnect_after_s=0.2)
        assert time.monotonic() - began < 1.0
    assert capture.status is None
    assert capture.terminal == "disconnected"


def streaming_app() -> FastAPI:
    app = FastAPI()

    @app.post("/gzip")
    async def gzip_stream() -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            compressor = zlib.compressobj(wbits=31)
            for i in range(5):
                await asyncio.sleep(0.05)
                yield compressor.compress(chat_frame(f"z{i} ").encode())
                yield compressor.flush(zlib.Z_SYNC_FLUSH)
            yield compressor.compress(b"data: [DONE]\n\n") + compressor.flush()

        return StreamingResponse(
            body(), media_type="text/event-stream", headers={"content-encoding": "gzip"}
        )

    @app.post("/heartbeats")
    async def heartbeats() -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            for _ in range(3):
                await asyncio.sleep(0.03)
                yield ": keep-alive\n\n"
            yield chat_frame("late")
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    @app.post("/drop")
    async def drop() -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            yield chat_frame("half")
            await asyncio.sleep(0.05)
            raise RuntimeError("upstream went away")

        return StreamingResponse(body(), media_type="text/event-stream")

    @app.post("/in-stream-error")
    async def in_stream_error() -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            yield chat_frame("partial ")
            yield 'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    @app.post("/429")
    async def too_many() -> JSONResponse:
        return JSONResponse(
            {"error": {"message": "slow down", "type": "rate_limit_error"}},
            status_code=429,
            headers={"retry-after": "2"},
        )

    @app.post("/unary")
    async def unary() -> JSONResponse:
        return JSONResponse(
            {
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
        )

    @app.post("/echo")
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"json": await request.json(), "probe": request.headers.get("x-probe")})

    @app.get("/flood")
    async def flood() -> StreamingResponse:
        app.state.sent = []  # (time, bytes handed to the server so far)

        async def body() -> AsyncIterator[bytes]:
            block = b": " + b"x" * 65_533 + b"\n"
            for i in range(400):  # 26 MB if nobody pushes back
                yield block
                app.state.sent.append((time.perf_counter(), (i + 1) * len(block)))

        return StreamingResponse(body(), media_type="text/event-stream")

    return app


@pytest.fixture
def server() -> Iterator[ThreadServer]:
    with serve(streaming_app(), name="capture-app") as handle:
        yield handle


def test_gzip_stream_keeps_compressed_chunk_times_and_decodes_events(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/gzip")
    assert capture.headers["content-encoding"] == "gzip"
    assert capture.text == "z0 z1 z2 z3 z4 "
    assert capture.terminal == "done"
    assert capture.bytes < len(capture.body)  # on the wire: compressed
    assert min(capture.gaps) > 0.02  # sync-flushed, so the tokens trickled


def test_comments_are_kept_with_their_arrival_times(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/heartbeats")
    assert [c.text for c in capture.comments] == ["keep-alive"] * 3
    assert [c.t for c in capture.comments] == sorted(c.t for c in capture.comments)
    assert capture.ttft is not None and capture.ttft > capture.comments[-1].t


def test_a_dropped_connection_is_recorded_as_truncated(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/drop")
    assert capture.text == "half"
    assert capture.terminal == "truncated"
    assert capture.transport_error is not None
    assert "RemoteProtocolError" in capture.transport_error


def test_an_in_stream_error_event_ends_the_capture_as_error(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/in-stream-error")
    assert capture.terminal == "error"
    assert capture.error == {"message": "overloaded", "type": "server_error"}
    assert capture.text == "partial "


def test_an_error_status_keeps_status_headers_and_error_body(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/429")
    assert capture.status == 429
    assert capture.headers["retry-after"] == "2"
    assert capture.terminal == "error"
    assert capture.error == {"message": "slow down", "type": "rate_limit_error"}
    assert capture.events == []


def test_a_unary_json_response_gives_text_and_usage(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/unary")
    assert capture.terminal == "done"
    assert capture.text == "hi"
    assert capture.usage == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assert capture.ttft is None


def test_json_body_and_headers_are_sent(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/echo", json={"a": 1}, headers={"X-Probe": "yes"})
    assert json.loads(capture.body) == {"json": {"a": 1}, "probe": "yes"}


def test_a_slow_reader_pushes_back_on_the_server(server: ThreadServer) -> None:
    began = time.perf_counter()
    capture = capture_stream(
        f"{server.url}/flood", method="GET", read_interval_s=0.05, disconnect_after_s=1.0
    )
    assert capture.terminal == "disconnected"
    # ~20 reads of at most 64 kB each; until we hung up, the server was blocked once the socket
    # buffers were full instead of running through all 26 MB. (After a disconnect uvicorn's
    # send() returns at once, so only what was sent before it counts.)
    assert len(capture.chunks) <= 21
    assert capture.bytes < 1_500_000
    sent_while_reading = max(n for t, n in server.app.state.sent if t < began + 0.9)
    assert sent_while_reading < 8_000_000


def test_a_fast_reader_gets_the_whole_flood(server: ThreadServer) -> None:
    capture = capture_stream(f"{server.url}/flood", method="GET")
    assert capture.bytes == 400 * 65_536
    assert len(capture.comments) == 400


def test_nothing_listening_raises_capture_error() -> None:
    with pytest.raises(CaptureError) as info:
        capture_stream("http://127.0.0.1:9/v1/chat/completions")
    assert str(info.value).startswith(
        "Expected a response from http://127.0.0.1:9/v1/chat/completions, "
        "but the request failed: ConnectError"
    )


@pytest.mark.anyio
async def test_async_capture_runs_concurrently(stream_server: ThreadServer) -> None:
    # Each stream takes 2.2 s: four together 2.2 s, one after another 8.8 s. Half of that leaves
    # 2.2 s for a busy machine's overhead (0.9 s seen beside two other workers).
    interval = 0.2
    began = time.perf_counter()
    captures: list[Capture] = await asyncio.gather(
        *(acapture_stream(f"{stream_server.url}/trickle?interval={interval}") for _ in range(4))
    )
    elapsed = time.perf_counter() - began
    assert all(c.terminal == "done" and c.content_events == TOKENS for c in captures)
    one_after_another = 4 * (TOKENS - 1) * interval
    assert elapsed < one_after_another / 2


def test_capture_works_while_an_event_loop_is_running(stream_server: ThreadServer) -> None:
    async def in_a_cell() -> Capture:
        return capture_stream(f"{stream_server.url}/trickle?n=3")

    assert asyncio.run(in_a_cell()).terminal == "done"
