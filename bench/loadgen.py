"""The load generator: its own process, plain asyncio sockets, 127.0.0.1 only.

Run as ``python -m bench.loadgen '<json spec>'``; it prints JSON lines on stdout: for the
``idle`` shape first ``{"event": "ready", ...}`` once the streams are open, and always a final
``{"event": "result", ...}``. Every shape is bounded in stream count and in time.

Shapes:

* ``steady`` -- a closed loop: ``streams`` workers each open a stream, read it to the end and
  open the next one at once, until ``seconds`` have passed (starts staggered over ``stagger_s``);
* ``burst`` -- ``streams`` streams started at the same instant (or spread evenly over
  ``stagger_s``), read to the end;
* ``idle`` -- ``streams`` streams whose first token is far away, held open ``hold_s`` seconds;
* ``slow`` -- ``streams`` long streams read ``read_bytes`` every ``read_every_s`` seconds,
  for ``hold_s`` seconds, then dropped.

Each HTTP/1.1 response is de-chunked here, and every SSE ``data:`` line is timestamped at the
socket read that completed it (the lowest layer we read), before anything is parsed. With
``count_tokens`` (and the mock's ``tps``) each content frame is also counted in tokens with the
mock's own tokenizer, and the result carries every stream's interval errors
(:func:`bench.stats.interval_errors`): how far each gap is from the mock's schedule.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench.stats import interval_errors

# at module level: importing inside a running stream would stall the event loop
from mock_upstream.tokenizer import count_tokens

HOST = "127.0.0.1"
PATH = "/v1/chat/completions"
READ_SIZE = 65536
CONTENT = re.compile(rb'"content":\s*"(?!")')  # a delta that carries text (not "" or null)


class Dechunker:
    """Incremental HTTP/1.1 chunked-body decoder: ``feed(bytes) -> bytes`` of payload."""

    def __init__(self) -> None:
        self.buffer = b""
        self.remaining = 0  # payload bytes left in the current chunk
        self.skip_crlf = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buffer += data
        out = bytearray()
        while self.buffer and not self.done:
            if self.remaining:
                take = self.buffer[: self.remaining]
                out += take
                self.buffer = self.buffer[len(take) :]
                self.remaining -= len(take)
                if not self.remaining:
                    self.skip_crlf = True
                continue
            if self.skip_crlf:
                if len(self.buffer) < 2:
                    break
                self.buffer = self.buffer[2:]
                self.skip_crlf = False
                continue
            line, sep, rest = self.buffer.partition(b"\r\n")
            if not sep:
                break
            self.buffer = rest
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                self.done = True
            self.remaining = size
        return bytes(out)


@dataclass
class Stream:
    """What one stream saw. ``start`` and ``first`` are monotonic; ``gaps`` in seconds."""

    start: float
    seed: int = -1  # the request's: the same seed asks the mock for the same answer
    status: int = 0
    connected: float | None = None  # the TCP connection open
    head: float | None = None  # the response's status line and headers read
    first: float | None = None
    last: float | None = None
    gaps: list[float] = field(default_factory=list)
    events: int = 0  # every data: line, content or not
    same_read: int = 0  # content chunks that arrived in the same read as the previous one
    done: bool = False
    error: str | None = None
    text: str = ""  # the content so far, with ``count_tokens`` only
    frames: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens so far)


def request_bytes(port: int, model: str, scenario: str | None, seed: int) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": f"bench stream {seed}"}],
            "stream": True,
            "seed": seed,
        }
    ).encode()
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer sk-bench\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    )
    if scenario:
        head += f"X-Mock-Scenario: {scenario}\r\n"
    return (head + "\r\n").encode() + body


async def read_head(reader: asyncio.StreamReader, stream: Stream) -> tuple[bool, int | None]:
    """Status line and headers: (chunked?, content-length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    stream.status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = headers.get("content-length")
    return "chunked" in headers.get("transfer-encoding", ""), int(length) if length else None


async def run_stream(
    spec: dict[str, Any],
    seed: int,
    deadline: float,
    settled: asyncio.Event | None = None,
    stream: Stream | None = None,
) -> Stream:
    """Open one stream and read it as the spec says; never raises, never outlives ``deadline``.

    ``settled`` is set once the response head arrived or the attempt failed."""
    stream = stream or Stream(start=time.monotonic())
    stream.start = time.monotonic()
    stream.seed = seed
    port = spec["port"]
    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + deadline - stream.start):
            reader, writer = await asyncio.open_connection(HOST, port)
            stream.connected = time.monotonic()
            try:
                writer.write(request_bytes(port, spec["model"], spec.get("scenario"), seed))
                await writer.drain()
                chunked, _length = await read_head(reader, stream)
                stream.head = time.monotonic()
                if settled is not None:
                    settled.set()
                if stream.status != 200:
                    body = await reader.read(300)
                    stream.error = f"HTTP {stream.status}: {body[-160:].decode(errors='replace')}"
                    return stream
                await read_body(spec, reader, stream, Dechunker() if chunked else None)
            finally:
                writer.close()
    except TimeoutError:
        stream.error = stream.error or "timeout"
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        stream.error = f"{type(exc).__name__}: {exc}"
    finally:
        if settled is not None:
            settled.set()
    return stream


async def read_body(
    spec: dict[str, Any], reader: asyncio.StreamReader, stream: Stream, chunks: Dechunker | None
) -> None:
    slow = spec["shape"] == "slow"
    counting = bool(spec.get("count_tokens"))
    size = spec.get("read_bytes", READ_SIZE) if slow else READ_SIZE
    pending = b""
    while True:
        if slow:
            await asyncio.sleep(spec["read_every_s"])
        data = await reader.read(size)
        now = time.monotonic()
        if not data:
            stream.error = "closed before [DONE]"
            return
        if chunks is not None:
            data = chunks.feed(data)
        pending += data
        *lines, pending = pending.split(b"\n")
        in_this_read = 0
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            stream.events += 1
            if line[5:].strip() == b"[DONE]":
                stream.done = True
                return
            if CONTENT.search(line):
                if stream.first is None:
                    stream.first = now
                elif stream.last is not None:
                    stream.gaps.append(now - stream.last)
                in_this_read += 1
                stream.last = now
                if counting:
                    chunk = json.loads(line[5:])
                    stream.text += chunk["choices"][0]["delta"]["content"]
                    stream.frames.append((now, count_tokens(stream.text)))
        stream.same_read += max(0, in_this_read - 1)


async def steady(spec: dict[str, Any]) -> list[Stream]:
    n, seconds = spec["streams"], spec["seconds"]
    begin = time.monotonic()
    end = begin + spec.get("stagger_s", 0.0) + seconds
    hard = end + spec["stream_timeout_s"]
    done: list[Stream] = []

    async def worker(i: int) -> None:
        await asyncio.sleep(spec.get("stagger_s", 0.0) * i / n)
        seed = i
        while time.monotonic() < end:
            done.append(await run_stream(spec, seed, hard))
            seed += n

    await asyncio.gather(*(worker(i) for i in range(n)))
    return done


async def burst(spec: dict[str, Any]) -> list[Stream]:
    n, stagger = spec["streams"], spec.get("stagger_s", 0.0)
    hard = time.monotonic() + spec["stream_timeout_s"]

    async def one(i: int) -> Stream:
        if stagger:
            await asyncio.sleep(stagger * i / n)
        return await run_stream(spec, i, hard)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def held(spec: dict[str, Any]) -> list[Stream]:
    """``idle`` and ``slow``: open the streams (staggered), report, hold, then drop them."""
    n = spec["streams"]
    hard = time.monotonic() + spec.get("open_s", 2.0) + spec["hold_s"] + 30
    events = [asyncio.Event() for _ in range(n)]
    streams = [Stream(start=0.0) for _ in range(n)]

    async def opener(i: int) -> Stream:
        await asyncio.sleep(spec.get("open_s", 2.0) * i / n)
        return await run_stream(spec, i, hard, events[i], streams[i])

    tasks = [asyncio.create_task(opener(i)) for i in range(n)]
    waiting = [asyncio.create_task(e.wait()) for e in events]
    _, pending = await asyncio.wait(waiting, timeout=spec.get("open_s", 2.0) + 15)
    for waiter in pending:
        waiter.cancel()
    open_now = sum(
        1 for s, t in zip(streams, tasks, strict=True) if s.status == 200 and not t.done()
    )
    print(json.dumps({"event": "ready", "open": open_now, "streams": n}), flush=True)
    await asyncio.sleep(spec["hold_s"])
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return [r if isinstance(r, Stream) else Stream(start=0.0, error="held") for r in results]


SHAPES = {"steady": steady, "burst": burst, "idle": held, "slow": held}


def slowest_first_tokens(streams: list[Stream], count: int = 10) -> list[dict[str, float]]:
    """Where the ``count`` slowest first tokens waited, in seconds from each stream's start: for
    the TCP connection, for the response head, and for the first token itself."""
    waits = []
    for s in streams:
        if s.first is None or s.connected is None or s.head is None:
            continue
        waits.append(
            {
                "connect_s": s.connected - s.start,
                "head_s": s.head - s.start,
                "first_s": s.first - s.start,
                "started_s": s.start,
            }
        )
    return sorted(waits, key=lambda w: w["first_s"], reverse=True)[:count]


def summarise(spec: dict[str, Any], streams: list[Stream], wall: float) -> dict[str, Any]:
    errors: dict[str, int] = {}
    counted: dict[str, Any] = {}
    if spec.get("count_tokens"):
        counted["interval_errors_s"] = [
            e for s in streams for e in interval_errors(s.frames, spec["tps"])
        ]
    for s in streams:
        if s.error and s.error != "held":
            errors[s.error] = errors.get(s.error, 0) + 1
    return {
        "event": "result",
        "shape": spec["shape"],
        "requested_streams": spec["streams"],
        "streams": len(streams),
        "completed": sum(1 for s in streams if s.done),
        "failed": sum(1 for s in streams if s.error and s.error != "held"),
        "errors": errors,
        "ttft_s": [s.first - s.start for s in streams if s.first is not None],
        "ttft_by_seed": {s.seed: s.first - s.start for s in streams if s.first is not None},
        "slowest_first_tokens": slowest_first_tokens(streams),
        "gaps_s": [g for s in streams for g in s.gaps],
        "stream_median_gaps_s": [sorted(s.gaps)[len(s.gaps) // 2] for s in streams if s.gaps],
        "events": sum(s.events for s in streams),
        "same_read": sum(s.same_read for s in streams),
        "wall_s": wall,
        "loadgen_cpu_s": time.process_time(),
        **counted,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    if spec.get("host", HOST) != HOST:
        raise SystemExit(f"the load generator only talks to {HOST}, got {spec['host']!r}")
    started = time.monotonic()
    streams = asyncio.run(SHAPES[spec["shape"]](spec))
    print(json.dumps(summarise(spec, streams, time.monotonic() - started)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
