"""What the reference relay adds to TTFT, and its CPU per event, at load and one at a time.

    python -m bench relay                     three rounds: 100 steady streams, then one at a time
    python -m bench relay --rounds 1 --configs reference reference-uvloop

Each round measures, on one mock (first token at 20 ms, then 20 tokens a second, 40 tokens):

* **at load** -- ``--streams`` steady streams for ``--seconds`` (each finished stream replaced at
  once), direct to the mock and then through each configuration: TTFT p50 and p99 of each, what
  the configuration adds to both, and its CPU per event (the server process tree's CPU over the
  SSE events the load generator received);
* **one at a time** -- one stream after another for ``--single-s`` seconds (two tokens each, so
  most of the time is first tokens), direct and through each: the median TTFT each adds.

The direct path and the configurations take turns inside each round, so a machine that gets
busier between rounds moves both. Issue 28's goals: at load the reference adds at most 2 ms to
p50 and 20 ms to p99, three rounds in a row; one at a time at most 2 ms. Results go to
``bench/results/relay-<time>.json``, with a figure beside it (``.png``: CPU per event and
what each configuration adds, round by round); the table is printed. ``--plot RUN.json`` draws
the figure of a saved run again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import configs, stats
from bench.runner import MODEL, TOKENS, TPS, TTFT_MS, loadgen, metered, reset_mock, spec_for

RESULTS = Path(__file__).resolve().parent / "results"
SINGLE_SCENARIO = "tokens=2"
GOALS = {"p50_added_ms": 2.0, "p99_added_ms": 20.0, "single_added_ms": 2.0}


def _steady(
    server: configs.Server, pid: int | None, streams: int, seconds: float
) -> dict[str, Any]:
    spec = spec_for(server, "steady", streams=streams, seconds=seconds, stagger_s=2.0)
    raw, cpu_s = metered(spec, pid)
    ttft = stats.Summary.of(raw["ttft_s"])
    return {
        "p50_ms": ttft.p50_ms,
        "p99_ms": ttft.p99_ms,
        "streams": raw["streams"],
        "failed": raw["failed"],
        "events": raw["events"],
        "cpu_s": cpu_s,
        "cpu_us_per_event": 1e6 * cpu_s / max(raw["events"], 1),
        "slowest_first_tokens": raw["slowest_first_tokens"][:5],
    }


def _single(server: configs.Server, seconds: float) -> dict[str, Any]:
    raw = loadgen(spec_for(server, "steady", streams=1, seconds=seconds, scenario=SINGLE_SCENARIO))
    if not raw["ttft_s"]:
        raise SystemExit(f"bench relay: no stream through {server.name} got a first token")
    return {"median_ms": stats.Summary.of(raw["ttft_s"]).p50_ms, "n": len(raw["ttft_s"])}


def run(
    chosen: list[configs.Config], rounds: int, streams: int, seconds: float, single_s: float
) -> dict[str, Any]:
    mock = configs.start_mock(TTFT_MS, TPS, TOKENS)
    servers: dict[str, configs.Server] = {}
    out: dict[str, Any] = {"rounds": [], "load_before": os.getloadavg()[0]}
    try:
        for config in chosen:
            servers[config.name] = config.start(mock)
        for number in range(rounds):
            row: dict[str, Any] = {"load": os.getloadavg()[0]}
            reset_mock(mock)
            row["direct"] = _steady(mock, mock.pid, streams, seconds)
            for config in chosen:
                reset_mock(mock)
                row[config.name] = _steady(
                    servers[config.name], servers[config.name].pid, streams, seconds
                )
            reset_mock(mock)
            row["direct_single"] = _single(mock, single_s)
            for config in chosen:
                reset_mock(mock)
                row[f"{config.name}_single"] = _single(servers[config.name], single_s)
            out["rounds"].append(row)
            _print_round(number + 1, row, chosen)
    finally:
        for server in servers.values():
            server.stop()
        mock.stop()
    return out


def _print_round(number: int, row: dict[str, Any], chosen: list[configs.Config]) -> None:
    direct, single = row["direct"], row["direct_single"]["median_ms"]
    print(
        f"round {number} (load {row['load']:.2f}): direct p50 {direct['p50_ms']:.1f} ms, "
        f"p99 {direct['p99_ms']:.1f} ms, one at a time {single:.2f} ms"
    )
    for config in chosen:
        at_load, alone = row[config.name], row[f"{config.name}_single"]["median_ms"]
        print(
            f"  {config.name}: adds {at_load['p50_ms'] - direct['p50_ms']:+.1f} ms p50, "
            f"{at_load['p99_ms'] - direct['p99_ms']:+.1f} ms p99, one at a time "
            f"{alone - single:+.2f} ms; {at_load['cpu_us_per_event']:.0f} µs CPU per event "
            f"({at_load['events']} events, {at_load['failed']} failed streams)",
            flush=True,
        )


def plot(result: dict[str, Any], path: Path) -> Path:
    """Two panels from a run's rounds: each configuration's CPU per event, and what it added to
    TTFT p50 and p99 at load (log scale: a stalled round adds seconds), round by round."""
    from matplotlib.figure import Figure  # a bare Figure draws with Agg, pyplot untouched

    rounds = result["rounds"]
    names = [n for n in rounds[0] if n not in ("load", "direct") and not n.endswith("_single")]
    fig = Figure(figsize=(11, 4))
    cpu, added = fig.subplots(1, 2)
    width = 0.8 / len(rounds)
    for number, row in enumerate(rounds):
        xs = [x + number * width for x in range(len(names))]
        label = f"round {number + 1}"
        cpu.bar(xs, [row[n]["cpu_us_per_event"] for n in names], width, label=label)
        for key, marker in (("p50_ms", "o"), ("p99_ms", "^")):
            gains = [max(row[n][key] - row["direct"][key], 0.1) for n in names]
            added.scatter(xs, gains, marker=marker, color=f"C{number}")
    for ax in (cpu, added):
        ax.set_xticks([x + width * (len(rounds) - 1) / 2 for x in range(len(names))], names)
        ax.tick_params(axis="x", labelrotation=15)
    cpu.set_ylabel("proxy CPU per SSE event (µs)")
    cpu.set_title("CPU per event, each round")
    cpu.legend(fontsize=8)
    added.set_yscale("log")
    added.axhline(GOALS["p50_added_ms"], color="grey", linestyle=":", linewidth=1)
    added.axhline(GOALS["p99_added_ms"], color="grey", linestyle="--", linewidth=1)
    added.set_ylabel("added TTFT at load (ms, log; ○ p50, △ p99)")
    added.set_title("What each adds over direct (goals: dotted p50, dashed p99)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench relay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--configs", nargs="+", default=["reference"], metavar="NAME")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--single-s", type=float, default=5.0)
    parser.add_argument(
        "--plot", metavar="JSON", type=Path, help="only draw the figure of a saved run, beside it"
    )
    args = parser.parse_args(argv)
    if args.plot is not None:
        print(f"saved {plot(json.loads(args.plot.read_text()), args.plot.with_suffix('.png'))}")
        return 0
    try:
        chosen = [c for c in configs.select(args.configs, False) if c.name != "direct"]
    except ValueError as exc:
        print(f"bench relay: {exc}", file=sys.stderr)
        return 2
    for config in chosen:
        if why := config.unavailable():
            print(f"bench relay: {config.name} cannot run here: {why}", file=sys.stderr)
            return 2
    result = run(chosen, args.rounds, args.streams, args.seconds, args.single_s)
    result.update(args=vars(args), goals=GOALS, model=MODEL)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("relay-%Y%m%d-%H%M%S.json")
    path.write_text(json.dumps(result, indent=1))
    print(f"saved {path} and {plot(result, path.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
