"""A reader that reads nothing: the mock goes on generating, as real engines do, unless the
scenario asks it to pause (``pause_on_backpressure``); either way a hang-up stops it at once.

The stalled reader is a raw socket with the lab's slow-reader receive buffer that reads nothing.
The server's listening socket has a 16 KB send buffer (the connection inherits it), so what the
reader leaves in flight is about 150 KB, some 750 tokens, on any machine. The answer is 40,000
tokens, so "stands still below a tenth of the answer" and "goes on to the end" are 5x and 10x
away from the 4,000-token line: no timing decides these tests, only counts.
"""

from __future__ import annotations

import gc
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mock_support import ACTIVE, FAST, LiveServer, live_server

from labkit.capture import SLOW_READER_RCVBUF
from mock_upstream.generation import RunAhead

pytestmark = pytest.mark.sockets

SEND_BUFFER = 16_384
TOKENS = 40_000
FLOOD = {"ttft_ms": 0, "tps": 20_000, "tokens": TOKENS}  # two seconds of generation
LINE = TOKENS // 10
DEADLINE_S = 60.0  # only a machine far slower than any we grade on gets near it
MARGIN_S = 0.5  # a hang-up must be seen within one token interval; wide scheduling margin


@pytest.fixture
def narrow_server() -> Iterator[LiveServer]:
    yield from live_server(FAST, send_buffer=SEND_BUFFER)


def stalled_reader(server: LiveServer, seed: int, **scenario: object) -> socket.socket:
    """Open a stream over a raw socket with a small receive buffer, and read nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)
    host, port = server.url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))
    body = json.dumps(
        {
            "model": "mock-gpt",
            "messages": [{"role": "user", "content": "Tell me about streaming."}],
            "stream": True,
            "mock": {**scenario, "seed": seed},
        }
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def record_of(server: LiveServer, seed: int) -> dict[str, Any] | None:
    found = [r for r in server.records() if r["scenario"].get("seed") == seed]
    return found[-1] if found else None


def wait_for(
    server: LiveServer, seed: int, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        record = record_of(server, seed)
        if record is not None and done(record):
            return record
        if time.monotonic() > deadline:
            pytest.fail(f"not reached within {DEADLINE_S} s: {record}")
        time.sleep(0.05)


def wait_until_sending_stands_still(server: LiveServer, seed: int) -> dict[str, Any]:
    """The record once ``tokens_sent`` has not moved for half a second (the socket is full)."""
    last: tuple[int, float] | None = None
    while True:
        record = wait_for(server, seed, lambda r: r["tokens_sent"] > 0)
        now = time.monotonic()
        if last is None or record["tokens_sent"] != last[0]:
            last = (record["tokens_sent"], now)
        elif now - last[1] >= 0.5:
            return record
        time.sleep(0.05)


def backlogs() -> list[int]:
    """Frames waiting in every live run-ahead buffer of this process."""
    gc.collect()
    return [g.backlog for g in gc.get_objects() if isinstance(g, RunAhead) and g.backlog]


def test_a_reader_that_reads_nothing_leaves_sending_still_while_generation_goes_to_the_end(
    narrow_server: LiveServer,
) -> None:
    reader = stalled_reader(narrow_server, 71, **FLOOD)
    try:
        record = wait_for(narrow_server, 71, lambda r: r["state"] not in ACTIVE)
        assert record["state"] == "completed"
        assert record["tokens_generated"] == record["completion_tokens"] == TOKENS
        assert 0 < record["tokens_sent"] < LINE
        assert narrow_server.metric("mock_tokens_generated_total") == TOKENS
        assert narrow_server.metric("mock_tokens_sent_total") == record["tokens_sent"]
        metrics = narrow_server.client.get("/metrics").text
        assert f'vllm:generation_tokens_total{{model_name="mock-gpt"}} {TOKENS}.0' in metrics
        time.sleep(0.3)
        assert record_of(narrow_server, 71) == record  # still nothing more sent
    finally:
        reader.close()
    assert wait_for(narrow_server, 71, lambda r: not backlogs())["tokens_sent"] < LINE


def test_with_pause_on_backpressure_a_reader_that_reads_nothing_pauses_generation_too(
    narrow_server: LiveServer,
) -> None:
    reader = stalled_reader(narrow_server, 72, **FLOOD, pause_on_backpressure=True)
    try:
        record = wait_until_sending_stands_still(narrow_server, 72)
        assert record["state"] == "running"
        assert 0 < record["tokens_sent"] < LINE
        # in step: at most the frame that waits in send was generated and not sent
        assert record["tokens_generated"] - record["tokens_sent"] <= 5
        time.sleep(0.5)
        assert record_of(narrow_server, 72) == record
    finally:
        reader.close()
    record = wait_for(narrow_server, 72, lambda r: r["state"] not in ACTIVE)
    assert record["state"] == "cancelled", record
    assert record["tokens_after_disconnect"] == 0


def test_a_reader_that_hangs_up_with_its_socket_full_stops_generation_at_once(
    narrow_server: LiveServer,
) -> None:
    """The hang-up lands while the body waits in uvicorn's send for the full socket (outside the
    body generator): the response's backstop cancels the generation task and drops its buffer."""
    endless = {"ttft_ms": 0, "tps": 2_000, "tokens": 10_000_000}
    reader = stalled_reader(narrow_server, 73, **endless)
    try:
        ahead = wait_for(narrow_server, 73, lambda r: r["tokens_generated"] > LINE)
        assert ahead["tokens_sent"] < LINE
        assert backlogs()
    finally:
        reader.close()
        closed_at = time.time()
    record = wait_for(narrow_server, 73, lambda r: r["state"] not in ACTIVE)
    assert record["state"] == "cancelled", record
    assert record["disconnected_at"] - closed_at < MARGIN_S
    assert record["tokens_after_disconnect"] == 0
    assert record["completion_tokens"] == record["tokens_generated"] < TOKENS
    time.sleep(0.3)
    assert record_of(narrow_server, 73) == record  # nothing generated since
    assert backlogs() == []
