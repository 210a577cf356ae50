"""Grade a class: one run against N shards side by side, and the merge that joins them.

    python -m bench.class_roster                      50 submissions; 1 run, then 2 shards
    python -m bench.class_roster --size 20 --shards 2 4

The roster is what a class hands in: correct proxies (copies of both references), the broken
proxies of ``tests/grading/broken`` (each twice) and files that cannot start (a syntax error,
an import error, no ``app``), in the proportions 14 : 24 : 12 at 50. The single run grades it
with ``--jobs`` = this machine's CPUs; the sharded runs start N ``labkit grade --shard K/N``
processes at once, sharing the same CPUs (``--jobs`` = CPUs / N each), then ``labkit merge``.
The merged ``grades.csv`` must equal the single run's, row for row; the wall times, and the
projection for 300 submissions on N machines, are printed and saved in
``bench/results/class-roster-<time>.json``.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.checks import CHECK_IDS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LABKIT = ROOT / ".venv" / "bin" / "labkit"
CANNOT_START = {
    "syntax": "def broken(:\n",
    "imports": "import not_a_module_anywhere\n",
    "no_app": "x = 1\n",
}


def make_roster(folder: Path, size: int) -> Path:
    """``size`` submissions in ``folder``: 28% correct, 48% broken, 24% that cannot start."""
    sys.path.insert(0, str(ROOT / "tests" / "grading"))
    sys.path.insert(0, str(ROOT))
    support = importlib.import_module("grading_support")
    roster = folder / "submissions"
    roster.mkdir(parents=True)
    correct = [ROOT / "solutions" / "proxy.py", ROOT / "solutions" / "aiohttp_proxy.py"]
    broken = [support.broken_source(name) for name in support.VARIANTS]
    counts = (round(size * 0.28), round(size * 0.48))
    for i in range(counts[0]):
        shutil.copy(correct[i % 2], roster / f"learner{len(list(roster.iterdir())):03d}.py")
    for i in range(counts[1]):
        (roster / f"learner{len(list(roster.iterdir())):03d}.py").write_text(
            broken[i % len(broken)]
        )
    kinds = list(CANNOT_START.values())
    while len(list(roster.iterdir())) < size:
        n = len(list(roster.iterdir()))
        (roster / f"learner{n:03d}.py").write_text(kinds[n % len(kinds)])
    return roster


def rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "grades.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def timed(commands: list[list[str]]) -> float:
    """Run ``commands`` at once; the wall time until the last one ends."""
    started = time.monotonic()
    running = [
        subprocess.Popen(c, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for c in commands
    ]
    for process in running:
        if process.wait() not in (0, 1):
            raise SystemExit(f"{' '.join(commands[running.index(process)])} failed")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.class_roster")
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--shards", type=int, nargs="+", default=[2])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs to share between the runs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="class-roster-") as scratch:
        folder = Path(scratch)
        roster = make_roster(folder, args.size)
        base = [str(LABKIT), "grade-class", str(roster)]
        times = {"1": timed([[*base, "--jobs", str(args.cpus), "--out", str(folder / "all")]])}
        print(f"1 run, {args.cpus} at a time: {times['1']:.0f} s", flush=True)
        for n in args.shards:
            jobs = max(1, args.cpus // n)
            outs = [folder / f"n{n}-shard{k}" for k in range(1, n + 1)]
            shards = [
                [*base, "--shard", f"{k}/{n}", "--jobs", str(jobs), "--out", str(out)]
                for k, out in enumerate(outs, start=1)
            ]
            wall = timed(shards)
            merged = folder / f"n{n}-merged"
            merge = [str(LABKIT), "merge", *map(str, outs), "--out", str(merged)]
            merge_s = timed([merge])
            same = rows(merged) == rows(folder / "all")
            times[str(n)] = wall + merge_s
            print(
                f"{n} shards side by side, {jobs} at a time each: {wall:.0f} s, merge "
                f"{merge_s:.1f} s; merged grades.csv equals the single run's: {same}",
                flush=True,
            )
            if not same:
                for a, b in zip(rows(merged), rows(folder / "all"), strict=True):
                    diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
                    if diff:
                        print(f"  {a['learner']}: merged vs single {diff}")
                        for check in set(diff) & set(CHECK_IDS):
                            for where in (merged, folder / "all"):
                                report = json.loads(
                                    (where / "reports" / f"{a['learner']}.json").read_text()
                                )
                                result = report["checks"][check]
                                print(f"    {where.name}: {result['verdict']} {result['evidence']}")
                return 1
        per_submission = times["1"] * args.cpus / args.size  # CPU-slot seconds per submission
        print(
            f"{per_submission:.1f} s per submission per CPU; 300 submissions on N machines of "
            f"{args.cpus} CPUs: about {300 * per_submission / args.cpus / 60:.0f} min / N"
        )
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"class-roster-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps({"size": args.size, "cpus": args.cpus, "wall_s": times}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
