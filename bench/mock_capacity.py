"""How many concurrent 20 tokens/s streams the mock upstream sustains on this machine.

Run it with ``python -m bench mock-capacity [--levels 100 500 1000] [--seconds 10]``.

* the mock runs in its own process (:func:`bench.configs.start_mock`) on 127.0.0.1, every
  stream ``--seconds`` long at 20 tokens/s after a first token at once;
* the load generator is the bench's own (``bench.loadgen``, its own process): a ``burst`` of
  ``streams`` streams started over ``RAMP_S``, each read to its end, every content frame
  timestamped at the socket read that completed it and counted in tokens (``count_tokens``);
* for every pair of consecutive content frames in a stream, the *interval error* is the
  measured gap minus the gap the mock's schedule promises (tokens in the later frame / tps;
  a frame may carry several tokens, counted with the mock's own tokenizer):
  :func:`bench.stats.interval_errors`;
* a level is *sustained* when every stream completed and the p99 of the absolute interval
  error (:func:`bench.stats.percentile`, the bench's one definition) is under 5 ms.

Each level is bounded in time; the results go to ``bench/results/mock_capacity-*.json`` and a
summary is printed. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

from bench import meter, runner, stats
from bench.configs import Server, start_mock
from bench.report import RESULTS

TPS = stats.TOKENS_PER_S
THRESHOLD_MS = 5.0
DEFAULT_LEVELS = (100, 500, 1000)
DEFAULT_SECONDS = 10.0
RAMP_S = 2.0


def measure(mock: Server, streams: int, seconds: float) -> dict[str, Any]:
    assert mock.pid is not None
    load_before = os.getloadavg()[0]
    cpu_before, wall_before = meter.read(mock.pid).cpu_s, time.monotonic()
    timeout = RAMP_S + seconds * 2 + 10
    raw = runner.loadgen(
        {
            **runner.spec_for(mock, "burst", streams=streams, stagger_s=RAMP_S),
            "count_tokens": True,
            "tps": TPS,
            "stream_timeout_s": timeout,
        },
        timeout=timeout + 60,
    )
    wall = time.monotonic() - wall_before
    errors_ms = [error * 1000 for error in raw["interval_errors_s"]]
    p99 = stats.percentile(errors_ms, 0.99)
    return {
        "streams": streams,
        "completed": raw["completed"],
        "failures": sorted(raw["errors"]),
        "intervals": len(errors_ms),
        "loadgen_cpu_s": raw["loadgen_cpu_s"],
        "p50_error_ms": stats.percentile(errors_ms, 0.50),
        "p99_error_ms": p99,
        "max_error_ms": max(errors_ms, default=float("nan")),
        "mean_error_ms": statistics.fmean(errors_ms) if errors_ms else float("nan"),
        "mock_cpu_percent": 100 * (meter.read(mock.pid).cpu_s - cpu_before) / wall,
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
    args = parser.parse_args(argv)

    mock = start_mock(ttft_ms=0, tps=TPS, tokens=int(args.seconds * TPS))
    levels: list[dict[str, Any]] = []
    try:
        for streams in args.levels:
            print(f"measuring {streams} streams for ~{args.seconds:g} s ...", file=sys.stderr)
            levels.append(measure(mock, streams, args.seconds))
    finally:
        mock.stop()

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
