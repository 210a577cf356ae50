"""Grade a class with and without its notebooks: what the in-notebook parts add to a class's time.

    python -m bench.class_with_notebooks                 50 learners, proxy-only then with notebooks
    python -m bench.class_with_notebooks --size 10 --runs 2      one ABBA of 10 learners

Every learner hands in the reference ``solutions/proxy.py``; in the *with notebooks* roster each
is a folder holding it and a copy of the instructor's ``notebooks/`` (so every part runs to its
verdict, the most the parts can cost), in the *proxy-only* roster a ``.py`` file. Both are graded
by ``labkit grade-class`` with its default ``--jobs``, one after the other, ``--runs`` times,
in ABBA order (proxy-only first in even runs, last in odd ones, so the machine's drift falls on
both sides: ``--runs 2`` is one ABBA); the wall times, the machine's busy CPU time, the load
before and after each run and the ratio of the medians are printed and saved in
``bench/results/class-with-notebooks-<time>.json``. Issue 30 asks for at most 1.5 times.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.meter import machine_busy_s

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LABKIT = ROOT / ".venv" / "bin" / "labkit"
REFERENCE = ROOT / "solutions" / "proxy.py"
NOTEBOOKS = ROOT / "notebooks"


def roster(folder: Path, size: int, notebooks: bool) -> Path:
    """``size`` learners in ``folder``: folders with proxy.py and notebooks/, or .py files."""
    folder.mkdir(parents=True)
    for n in range(size):
        name = f"learner-{n:03d}"
        if notebooks:
            learner = folder / name
            learner.mkdir()
            shutil.copy(REFERENCE, learner / "proxy.py")
            shutil.copytree(NOTEBOOKS, learner / "notebooks", ignore=_not_notebooks)
        else:
            shutil.copy(REFERENCE, folder / f"{name}.py")
    return folder


def _not_notebooks(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".ipynb")]


def grade(submissions: Path, out: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    cpu_before = machine_busy_s()
    started = time.monotonic()
    done = subprocess.run(
        [str(LABKIT), "grade-class", str(submissions), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    cpu = machine_busy_s() - cpu_before
    if done.returncode not in (0, 1):
        raise SystemExit(f"labkit grade-class exited {done.returncode}:\n{done.stderr[-2000:]}")
    with (out / "grades.csv").open(newline="") as grades:
        rows = list(csv.DictReader(grades))
    return {
        "wall_s": round(wall, 1),
        "machine_cpu_s": round(cpu, 1),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "learners": len(rows),
        "full_marks": sum(1 for row in rows if row["score"] == row["max_score"]),
        "short_of_full_marks": {
            row["learner"]: sorted(
                f"{column} {value}"
                for column, value in row.items()
                if value in ("failed", "inconclusive") or (column == "problem" and value)
            )
            for row in rows
            if row["score"] != row["max_score"]
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.class_with_notebooks")
    parser.add_argument("--size", type=int, default=50, help="learners in the class")
    parser.add_argument("--runs", type=int, default=1, help="pairs of gradings, in ABBA order")
    args = parser.parse_args(argv)
    runs: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="class-with-notebooks-") as tmp:
        work = Path(tmp)
        rosters = {
            "proxy_only": roster(work / "proxy-only", args.size, notebooks=False),
            "with_notebooks": roster(work / "with-notebooks", args.size, notebooks=True),
        }
        for run in range(args.runs):
            order = list(rosters.items()) if run % 2 == 0 else list(rosters.items())[::-1]
            pair = {
                kind: grade(submissions, work / f"out-{kind}-{run}") for kind, submissions in order
            }
            runs.append(pair)
            print(json.dumps(pair), flush=True)
    medians = {
        kind: statistics.median(r[kind]["wall_s"] for r in runs)
        for kind in ("proxy_only", "with_notebooks")
    }
    ratio = medians["with_notebooks"] / medians["proxy_only"]
    print(
        f"median proxy-only {medians['proxy_only']:.1f} s, with notebooks "
        f"{medians['with_notebooks']:.1f} s: {ratio:.2f} times (issue 30: at most 1.5)"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    record = {"size": args.size, "runs": runs, "medians_s": medians, "ratio": round(ratio, 3)}
    (RESULTS / f"class-with-notebooks-{stamp}.json").write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
