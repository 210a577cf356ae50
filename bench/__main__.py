"""``python -m bench`` (``make bench``): the cost of a streaming proxy, measured side by side.

    python -m bench                     all configurations, full sizes (several minutes)
    python -m bench --quick             direct, reference, nginx; small sizes (< 1 min)
    python -m bench --configs direct reference nginx
    python -m bench --suite unit grade  also time parts of the test suite (not by default)
    python -m bench mock-capacity [...] the mock upstream's own capacity (bench/mock_capacity.py)
    python -m bench soak [...]          the reliability soak (tests/reliability/soak.py)
    python -m bench relay [...]         what the reference relay adds to TTFT (bench/relay.py)
    python -m bench windows [...]       a hang-up's cost to the real engine, queued and whole
                                        (bench/windows.py)
    python -m bench resume [...]        resumable streams on two replicas behind nginx, one
                                        Redis: resume, Stop, grace, Redis down, memory
                                        (bench/resume.py)
    python -m bench report FILE.json    print the table and goals of an earlier run again

Results: ``bench/results/bench-<time>.json`` and PNG plots beside it; the markdown table for the
README and the reference proxy's goals are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import configs, report, runner, suite

HERE = Path(__file__).resolve().parent
# Parts run as their own programs: a module of this package, or a file (the soak lives beside
# the reliability tests whose quick version runs it).
PARTS = {
    "mock-capacity": HERE / "mock_capacity.py",
    "relay": HERE / "relay.py",
    "windows": HERE / "windows.py",
    "resume": HERE / "resume.py",
    "soak": HERE.parent / "tests" / "reliability" / "soak.py",
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_part(name: str, rest: list[str]) -> int:
    path = PARTS[name]
    if not path.exists():
        print(
            f"bench: {name} is not available yet: expected {path.relative_to(HERE.parent)}, "
            "found no such file",
            file=sys.stderr,
        )
        return 2
    program = ["-m", f"bench.{path.stem}"] if path.parent == HERE else [str(path)]
    # the repository root on the path, as `python -m` from it gives: `solutions` is not installed
    paths = [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, *program, *rest], env=env, check=False).returncode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.split("\n\n")[0].split(": ", 1)[1]
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, three configurations (under a minute)"
    )
    parser.add_argument(
        "--configs",
        nargs="+",
        metavar="NAME",
        help="configurations to run (direct always runs): "
        + ", ".join(c.name for c in configs.CONFIGS),
    )
    parser.add_argument(
        "--suite",
        nargs="+",
        choices=suite.PARTS,
        metavar="PART",
        help=f"also record the wall time of: {', '.join(suite.PARTS)}",
    )
    parser.add_argument("--no-proxies", action="store_true", help="skip the proxy benchmark")
    return parser


def stop_on_sigterm() -> None:
    """SIGTERM becomes SystemExit, so the runner's ``finally`` blocks stop every server."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if argv is None:
        stop_on_sigterm()
    if args_in and args_in[0] in PARTS:
        return run_part(args_in[0], args_in[1:])
    if args_in and args_in[0] == "report":
        if len(args_in) != 2:
            print("bench: expected `python -m bench report FILE.json`", file=sys.stderr)
            return 2
        print_summary(json.loads(Path(args_in[1]).read_text()), [])
        return 0
    args = build_parser().parse_args(args_in)
    try:
        chosen = configs.select(args.configs, args.quick)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    stem = time.strftime("bench-%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    result: dict[str, object] = {}
    if not args.no_proxies:
        plan = runner.Plan.quick() if args.quick else runner.Plan()
        log(f"load average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        run = runner.Run(chosen, plan, log).execute()
        result = run.__dict__
        result["mode"] = "quick" if args.quick else "full"
    if args.suite:
        timings = []
        for part in args.suite:
            log(f"timing {part} ...")
            timings.append(suite.time_part(part))
        result["suite"] = timings
    if not result:
        return 0
    if "configs" not in result:
        result.update({"configs": {}, "machine": runner.machine(), "loadavg": []})
    paths = report.write(result, stem)
    print_summary(result, paths)
    return 0


def print_summary(result: dict[str, object], paths: list[Path]) -> None:
    if result.get("configs"):
        print(report.table(result))
        print()
        print(report.loadavg_text(result))
        for name, why in dict(result.get("skipped", {})).items():  # type: ignore[call-overload]
            print(f"skipped {name}: {why.splitlines()[0]}")
        for name in report.GOAL_CONFIGS:
            if name in result["configs"]:  # type: ignore[operator]
                print(f"\n{name} against the bench's goals (README, Benchmarks):")
                print(report.goals_text(result, name))
    for timing in result.get("suite", []):  # type: ignore[attr-defined]
        status = "timed out" if timing["timed_out"] else f"exit {timing['exit_code']}"
        print(
            f"suite {timing['part']}: {timing['wall_s']:.1f} s ({status}, "
            f"load {timing['loadavg_1m_before']:.1f})"
        )
    if paths:
        print("\nresults: " + ", ".join(str(p.relative_to(HERE.parent)) for p in paths))


if __name__ == "__main__":
    sys.exit(main())
