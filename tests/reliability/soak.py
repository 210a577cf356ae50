"""Soak the reference proxy with mixed streams and check nothing leaks.

``python -m bench soak [--streams 3000] [--concurrency 50] [--max-seconds 240]`` (which runs
``python tests/reliability/soak.py``: it lives beside the reliability tests it belongs to)

* the mock upstream and the reference proxy each run in a child process on 127.0.0.1; the proxy
  is served through :data:`instrumented_app`, which answers ``GET /__soak/stats`` (asyncio
  tasks, threads, open fds of that process) and passes everything else to the reference app;
* the load is a fixed mix (healthy, in-stream error, dropped connection, stall, 429, a broken
  frame, refusal, clients that hang up before the first token or mid-stream, slow readers),
  ``concurrency`` at a time, and stops by itself at ``--max-seconds`` whatever happened;
* before and after, with the mock idle: the proxy's open fds, TCP connections, asyncio tasks,
  threads and resident memory (psutil); the report says each one's change and its tolerance.
  Every request must leave exactly one usage line with the outcome its kind expects.

The quick version (300 streams) runs in ``make test`` (``test_soak_quick.py`` beside this);
the full one writes ``bench/results/soak-*.json``. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from labkit import MockUpstream, acapture_stream, serve_subprocess
from solutions.proxy import app as reference_app

STATS_PATH = "/__soak/stats"
GC_PATH = "/__soak/gc"  # a full garbage collection, then the stats
CHAT = "/v1/chat/completions"
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
MOCK_TARGET = "mock_upstream.served:app"

# Tolerances, after the proxy has settled: a warm-up round fills httpx's pool (up to 20 kept-alive
# connections) and Python's allocator first, so what is left is growth per request, if any.
FD_TOLERANCE = 8
CONNECTION_TOLERANCE = 8
TASK_TOLERANCE = 0
THREAD_TOLERANCE = 2
RSS_TOLERANCE_MB = 25.0
SETTLE_S = 5.0


# -- the proxy under test, with a window on its own process ---------------------------------
def _process_stats() -> dict[str, int]:
    return {
        "tasks": len(asyncio.all_tasks()) - 1,  # not counting the task answering this
        "threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1,
    }


async def instrumented_app(scope: Any, receive: Any, send: Any) -> None:
    """The reference proxy, plus ``GET /__soak/stats`` about the process it runs in."""
    if scope["type"] == "http" and scope["path"] in (STATS_PATH, GC_PATH):
        collected = gc.collect() if scope["path"] == GC_PATH else 0
        body = json.dumps({**_process_stats(), "collected": collected}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await reference_app(scope, receive, send)


# -- the mix ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    name: str
    mock: dict[str, Any]
    outcome: str  # the usage line's outcome
    capture: dict[str, Any] = field(default_factory=dict)


PACE = {"ttft_ms": 10, "tps": 200, "tokens": 20}
MIX: tuple[Kind, ...] = (
    Kind("healthy", {}, "completed"),
    Kind("healthy_long", {"tokens": 60}, "completed"),
    Kind("error_after", {"error_after": 5}, "error"),
    Kind("drop_after", {"drop_after": 5}, "error"),
    Kind("stall", {"stall_after": 3, "stall_s": 0.3}, "completed"),
    Kind("status_429", {"status": 429, "retry_after": 1}, "error"),
    Kind("malformed", {"malformed_after": 4}, "completed"),
    Kind("refusal", {"refusal_after": 5}, "completed"),
    # Hangs up 1 s in, well before the first token (5 s): late enough for a proxy on a busy
    # machine to have forwarded the request, and early enough that a client late by seconds
    # still leaves first. Likewise the stream left after two events has 10 s still to go. A
    # client that leaves only after its stream ended sees it completed, and the proxy rightly
    # logs it so (both seen on busy days: docs/measurements.md).
    Kind("leaves_before_first", {"ttft_ms": 5000}, "cancelled", {"disconnect_after_s": 1.0}),
    Kind(
        "leaves_mid_stream", {"tps": 20, "tokens": 200}, "cancelled", {"disconnect_after_events": 2}
    ),
    Kind("slow_reader", {"tokens": 40}, "completed", {"read_interval_s": 0.01}),
)


@dataclass
class Snapshot:
    fds: int
    connections: int
    tasks: int
    threads: int
    rss_mb: float


def snapshot(proxy_url: str, pid: int) -> Snapshot:
    stats = httpx.get(proxy_url + STATS_PATH, timeout=10.0).json()
    process = psutil.Process(pid)
    return Snapshot(
        fds=process.num_fds(),
        connections=len(process.net_connections(kind="tcp")),
        tasks=int(stats["tasks"]),
        threads=process.num_threads(),
        rss_mb=round(process.memory_info().rss / 2**20, 1),
    )


@dataclass
class SoakReport:
    streams: int
    concurrency: int
    seconds: float
    stopped_early: bool
    by_kind: dict[str, int]
    baseline: Snapshot
    after: Snapshot
    client_threads_before: int
    client_threads_after: int
    upstream_requests: int
    never_reached_upstream: int
    usage_lines: int
    usage_lines_needing_gc: int
    usage_expected: int
    wrong_outcomes: list[str]
    unfinished: list[str]
    mock_running_after: float
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


async def _one(proxy_url: str, kind: Kind, seed: int) -> tuple[str, str | None]:
    body = {
        "model": "mock-gpt",
        "messages": [{"role": "user", "content": f"soak {seed}"}],
        "stream": True,
        "mock": {**PACE, **kind.mock, "seed": seed},
    }
    try:
        cap = await acapture_stream(proxy_url + CHAT, json=body, timeout=30.0, **kind.capture)
    except Exception as exc:
        return kind.name, f"{type(exc).__name__}: {exc}"
    if kind.outcome == "cancelled":
        ok = cap.terminal == "disconnected"
    elif kind.name.startswith("status_"):
        ok = cap.status == 429
    else:
        ok = cap.terminal == ("done" if kind.outcome == "completed" else "error")
    return kind.name, None if ok else f"terminal {cap.terminal} status {cap.status}"


async def _drive(
    proxy_url: str, streams: int, concurrency: int, deadline: float, seeds: itertools.count[int]
) -> tuple[Counter[str], list[str], dict[int, str], int]:
    """Send ``streams`` requests, ``concurrency`` at a time; stop starting new ones at deadline."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(streams):
        queue.put_nowait(n)
    by_kind: Counter[str] = Counter()
    unfinished: list[str] = []
    expected: dict[int, str] = {}

    async def worker() -> None:
        while not queue.empty() and time.monotonic() < deadline:
            n = queue.get_nowait()
            kind = MIX[n % len(MIX)]
            seed = next(seeds)
            expected[seed] = kind.outcome
            name, problem = await _one(proxy_url, kind, seed)
            by_kind[name] += 1
            if problem:
                unfinished.append(f"{name}: {problem}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return by_kind, unfinished, expected, queue.qsize()


def _usage(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _wait(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _settle(proxy_url: str, pid: int, mock: MockUpstream, baseline: Snapshot | None) -> Snapshot:
    """Wait (bounded) for the mock to be idle and the proxy's tasks to drain, then measure."""
    deadline = time.monotonic() + SETTLE_S
    mock.wait_until_idle(SETTLE_S)
    while True:
        snap = snapshot(proxy_url, pid)
        if baseline is None or snap.tasks <= baseline.tasks or time.monotonic() > deadline:
            return snap
        time.sleep(0.1)


def run_soak(
    streams: int = 3000,
    concurrency: int = 50,
    max_seconds: float = 240.0,
    warmup: int = 100,
) -> SoakReport:
    """Run the soak; never raises for what the proxy does (that goes in ``problems``)."""
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        usage_log = Path(tmp) / "usage.jsonl"
        with (
            serve_subprocess(MOCK_TARGET, name="soak-mock") as mock_server,
            serve_subprocess(
                f"{Path(__file__).resolve()}:instrumented_app",
                name="soak-proxy",
                env={"UPSTREAM_URL": mock_server.url, "USAGE_LOG": str(usage_log)},
            ) as proxy,
        ):
            assert proxy.pid is not None
            mock = MockUpstream(mock_server.url)
            seeds = itertools.count(900_000)
            started = time.monotonic()
            deadline = started + max_seconds
            # warm-up: the pool, the allocator and lazy imports reach their working size
            asyncio.run(_drive(proxy.url, warmup, concurrency, deadline, seeds))
            baseline = _settle(proxy.url, proxy.pid, mock, None)
            threads_before = threading.active_count()
            lines_before = len(_usage(usage_log))
            by_kind, unfinished, expected, left = asyncio.run(
                _drive(proxy.url, streams, concurrency, deadline, seeds)
            )
            seconds = time.monotonic() - started
            after = _settle(proxy.url, proxy.pid, mock, baseline)
            threads_after = threading.active_count()
            mock_running = mock.metrics().get("mock_requests_running", -1.0)
            records = [r for r in mock.requests() if r["scenario"].get("seed") in expected]
            # the last usage lines are written as the streams' bodies end: wait for them, and
            # if some are still missing, see whether only a garbage collection writes them
            want_lines = lines_before + len(expected)
            _wait(lambda: len(_usage(usage_log)) >= want_lines, SETTLE_S)
            lines_needing_gc = 0
            if len(_usage(usage_log)) < want_lines:
                before_gc = len(_usage(usage_log))
                httpx.get(proxy.url + GC_PATH, timeout=10.0)
                _wait(lambda: len(_usage(usage_log)) >= want_lines, 1.0)
                lines_needing_gc = len(_usage(usage_log)) - before_gc
            lines = _usage(usage_log)[lines_before:]
            proxy_alive = proxy.running
            proxy_stderr = proxy.stderr()

    # Requests the proxy never read (the client left before it was parsed, under load) reach
    # neither the upstream nor the log: every request that reached the upstream needs a line.
    # A request the proxy read whose client left before it reached the upstream (the route's
    # watch cancelled the send) is logged cancelled and never reaches it: one line more than
    # the upstream's requests, for each such client at most.
    reached = {r["scenario"]["seed"] for r in records}
    never_reached = len(expected) - len(reached)
    left_unsent = sum(
        1 for seed, outcome in expected.items() if seed not in reached and outcome == "cancelled"
    )
    unsent_lines = min(max(len(lines) - len(records), 0), left_unsent)
    want = Counter(outcome for seed, outcome in expected.items() if seed in reached)
    want["cancelled"] += unsent_lines
    got = Counter(str(line.get("outcome")) for line in lines)
    wrong = [f"{k}: expected {want[k]}, logged {got[k]}" for k in want | got if want[k] != got[k]]
    problems: list[str] = []
    if not proxy_alive:
        problems.append("the proxy process died")
    tracebacks = proxy_stderr.count("Traceback")
    if tracebacks:
        problems.append(f"the proxy logged {tracebacks} tracebacks: {proxy_stderr[-600:]}")
    if left and time.monotonic() >= deadline:
        problems.append(f"stopped at --max-seconds with {left} streams not sent")
    if unfinished:
        problems.append(f"{len(unfinished)} streams ended wrongly, e.g. {unfinished[:3]}")
    if len(lines) != len(records) + unsent_lines:
        problems.append(
            f"{len(lines)} usage lines for {len(records)} upstream requests and "
            f"{left_unsent} clients that left before theirs was sent"
        )
    if never_reached > len(expected) // 20:
        problems.append(f"{never_reached} requests never reached the upstream")
    if lines_needing_gc:
        problems.append(
            f"{lines_needing_gc} usage lines were written only after a garbage collection "
            "(a body generator abandoned at a yield is finalized by the GC)"
        )
    if wrong:
        problems.append(f"usage outcomes differ: {wrong}")
    if mock_running != 0:
        problems.append(f"mock_requests_running is {mock_running:g} after the soak")
    limits = {
        "fds": FD_TOLERANCE,
        "connections": CONNECTION_TOLERANCE,
        "tasks": TASK_TOLERANCE,
        "threads": THREAD_TOLERANCE,
    }
    for name, tolerance in limits.items():
        grew = getattr(after, name) - getattr(baseline, name)
        if grew > tolerance:
            problems.append(f"proxy {name} grew by {grew} (tolerance {tolerance})")
    if after.rss_mb - baseline.rss_mb > RSS_TOLERANCE_MB:
        problems.append(
            f"proxy RSS grew by {after.rss_mb - baseline.rss_mb:.1f} MB "
            f"(tolerance {RSS_TOLERANCE_MB:g} MB)"
        )
    if threads_after - threads_before > THREAD_TOLERANCE:
        problems.append(f"client threads grew from {threads_before} to {threads_after}")
    return SoakReport(
        streams=sum(by_kind.values()),
        concurrency=concurrency,
        seconds=round(seconds, 2),
        stopped_early=bool(left),
        by_kind=dict(sorted(by_kind.items())),
        baseline=baseline,
        after=after,
        client_threads_before=threads_before,
        client_threads_after=threads_after,
        upstream_requests=len(records),
        never_reached_upstream=never_reached,
        usage_lines=len(lines),
        usage_lines_needing_gc=lines_needing_gc,
        usage_expected=len(expected),
        wrong_outcomes=wrong,
        unfinished=unfinished[:20],
        mock_running_after=mock_running,
        problems=problems,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--max-seconds", type=float, default=240.0)
    parser.add_argument("--no-save", action="store_true", help="print only, write no JSON")
    args = parser.parse_args(argv)
    report = run_soak(args.streams, args.concurrency, args.max_seconds)
    data = report.to_json()
    print(json.dumps(data, indent=2))
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"written to {out}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
