"""How many concurrent 20 tokens/s streams the mock upstream sustains on this machine.

Run by ``make bench`` (or ``python bench/mock_capacity.py [--levels 100 500 1000]``).

* the mock runs in its own process (``python -m mock_upstream.cli``) on 127.0.0.1;
* the load generator runs in another process (this script with ``--worker``): plain asyncio
  sockets, one HTTP/1.1 connection per stream, every ``data:`` line timestamped at the read
  that completed it;
* for every pair of consecutive content frames in a stream, the *interval error* is the
  measured gap minus the gap the mock's schedule promises (tokens in the later frame / tps;
  a frame may carry several tokens, counted with the mock's own tokenizer);
* a level is *sustained* when every stream completed and the p99 of the absolute interval
  error is under 5 ms.

Each level is bounded in time; the results go to ``bench/results/mock_capacity-*.json`` and a
summary is printed. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

# at module level: importing inside a running stream would stall the event loop
from mock_upstream.tokenizer import count_tokens

HOST = "127.0.0.1"
TPS = 20.0
THRESHOLD_MS = 5.0
DEFAULT_LEVELS = (100, 500, 1000)
DEFAULT_SECONDS = 10.0
RAMP_S = 2.0
RESULTS = Path(__file__).parent / "results"


# -- load generator (runs in its own process) ---------------------------------------------
async def one_stream(port: int, tokens: int, delay: float, deadline: float) -> dict[str, Any]:
    await asyncio.sleep(delay)
    body = json.dumps(
        {
            "model": "mock-gpt",
            "messages": [{"role": "user", "content": f"bench {delay:.6f}"}],
            "stream": True,
            "mock": {"ttft_ms": 0, "tps": TPS, "tokens": tokens},
        }
    ).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    frames: list[tuple[float, int]] = []  # (arrival, cumulative tokens)
    text = ""
    done = False
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError as exc:
        return {"ok": False, "error": f"connect: {exc}", "frames": []}
    try:
        writer.write(request)
        await writer.drain()
        pending = b""
        while not done:
            left = deadline - time.monotonic()
            if left <= 0:
                return {"ok": False, "error": "timeout", "frames": frames}
            data = await asyncio.wait_for(reader.read(65536), timeout=left)
            now = time.monotonic()
            if not data:
                break
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(payload)
                content = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
                if content:
                    text += content
                    frames.append((now, count_tokens(text)))
    except (OSError, TimeoutError, json.JSONDecodeError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "frames": frames}
    finally:
        writer.close()
    return {"ok": done, "error": None if done else "ended early", "frames": frames}


async def run_worker(port: int, streams: int, seconds: float) -> dict[str, Any]:
    tokens = int(seconds * TPS)
    deadline = time.monotonic() + RAMP_S + seconds * 2 + 10
    started = time.process_time()
    results = await asyncio.gather(
        *(one_stream(port, tokens, RAMP_S * i / streams, deadline) for i in range(streams))
    )
    errors_ms: list[float] = []
    for result in results:
        frames = result["frames"]
        for (t0, n0), (t1, n1) in itertools.pairwise(frames):
            errors_ms.append(abs((t1 - t0) - (n1 - n0) / TPS) * 1000)
    return {
        "streams": streams,
        "completed": sum(1 for r in results if r["ok"]),
        "failures": sorted({r["error"] for r in results if not r["ok"]}),
        "intervals": len(errors_ms),
        "errors_ms": errors_ms,
        "loadgen_cpu_s": time.process_time() - started,
    }


# -- orchestration --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(port: int, process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the mock exited with code {process.returncode} before starting")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the mock did not answer /healthz within {timeout} s")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(port: int, mock_pid: int, streams: int, seconds: float) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    cpu_before, wall_before = cpu_seconds(mock_pid), time.monotonic()
    worker = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            "--port",
            str(port),
            "--streams",
            str(streams),
            "--seconds",
            str(seconds),
        ],
        capture_output=True,
        timeout=RAMP_S + seconds * 2 + 60,
        check=True,
    )
    wall = time.monotonic() - wall_before
    raw = json.loads(worker.stdout)
    errors = raw.pop("errors_ms")
    p99 = percentile(errors, 0.99)
    return {
        **raw,
        "p50_error_ms": percentile(errors, 0.50),
        "p99_error_ms": p99,
        "max_error_ms": max(errors, default=float("nan")),
        "mean_error_ms": statistics.fmean(errors) if errors else float("nan"),
        "mock_cpu_percent": 100 * (cpu_seconds(mock_pid) - cpu_before) / wall,
        # other work on the machine delays timers too: keep the evidence with the numbers
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
        "sustained": raw["completed"] == streams and p99 < THRESHOLD_MS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=list(DEFAULT_LEVELS))
    parser.add_argument(
        "--seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help="length of each stream at 20 tokens/s (%(default)s)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--streams", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(asyncio.run(run_worker(args.port, args.streams, args.seconds))))
        return 0

    port = free_port()
    mock = subprocess.Popen(
        [sys.executable, "-m", "mock_upstream.cli", "--host", HOST, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    levels: list[dict[str, Any]] = []
    try:
        wait_healthy(port, mock)
        for streams in args.levels:
            print(f"measuring {streams} streams for ~{args.seconds:g} s ...", file=sys.stderr)
            levels.append(measure(port, mock.pid, streams, args.seconds))
    finally:
        mock.terminate()
        try:
            mock.wait(timeout=10)
        except subprocess.TimeoutExpired:
            mock.kill()

    sustained = [lv["streams"] for lv in levels if lv["sustained"]]
    report = {
        "benchmark": "mock_capacity",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "tps": TPS,
        "seconds_per_stream": args.seconds,
        "threshold_p99_ms": THRESHOLD_MS,
        "levels": levels,
        "max_sustained_streams": max(sustained, default=0),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"mock_capacity-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")

    print(
        f"mock upstream capacity at {TPS:g} tokens/s per stream "
        f"(p99 interval error < {THRESHOLD_MS:g} ms), {os.cpu_count()} CPUs"
    )
    print(
        f"{'streams':>8} {'done':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'mock cpu':>9}  verdict"
    )
    for lv in levels:
        print(
            f"{lv['streams']:>8} {lv['completed']:>6} {lv['p50_error_ms']:>8.2f} "
            f"{lv['p99_error_ms']:>8.2f} {lv['max_error_ms']:>8.1f} "
            f"{lv['mock_cpu_percent']:>8.0f}%  {'ok' if lv['sustained'] else 'NOT sustained'}"
            + (f" ({', '.join(lv['failures'])})" if lv["failures"] else "")
        )
    busiest = max((lv["loadavg_1m_before"] for lv in levels), default=0.0)
    if busiest > (os.cpu_count() or 1) / 2:
        print(
            f"note: the 1-minute load average was up to {busiest:.1f} before a level started; "
            "other processes were competing for the CPUs, so these figures are pessimistic"
        )
    print(f"max sustained: {report['max_sustained_streams']} streams; results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
