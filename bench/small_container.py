"""Grade inside a small container: a cgroup with Gradescope's default limits (0.5 vCPU, 768 MB).

    python -m bench.small_container                      reference, aiohttp reference, every
                                                         broken proxy; 3 runs each
    python -m bench.small_container --runs 1 --only reference no_cancel
    python -m bench.small_container --cpu 0.25 --memory-mb 512
    python -m bench.small_container --jobs 2     two gradings at once, each in its own cgroup

Each grading is one ``labkit grade FILE --json`` run with its process (and so the grader, the
mocks and the proxies it starts) in a fresh cgroup: ``cpu.cfs_quota_us`` / ``cpu.max`` for the
CPU share and ``memory.limit_in_bytes`` / ``memory.max`` for memory, cgroup v1 or v2. One
submission at a time by default, as Gradescope grades one submission per container
(``--jobs`` runs more at once, each in its own cgroup: keep jobs x cpu under the machine's
cores). The table says, for each submission and run, which checks failed against which it
should fail (the lab's checks in ``FAILS`` of its ``tests/grading/broken/*.py``; none for the
references; a broken proxy only a ``gateway`` check catches is left out), and
which were inconclusive; the evidence of every unexpected verdict is printed below it. Results go to
``bench/results/small-container-<time>.json``.

Needs root and a writable cgroup hierarchy (``labkit.grading.cgroups.Cgroup.make`` says why
not otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.checks.machine import CGROUP_ROOT
from labkit.grading.cgroups import Cgroup, CgroupLimits, CgroupUnavailable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
REFERENCES = {
    "reference": ROOT / "solutions" / "proxy.py",
    "aiohttp-reference": ROOT / "solutions" / "aiohttp_proxy.py",
}
GRADE_TIMEOUT_S = 300.0


@contextlib.contextmanager
def small_cgroup(cpu: float = 0.5, memory_mb: int = 768) -> Iterator[Cgroup]:
    """A cgroup with ``cpu`` CPUs and ``memory_mb`` MiB at the top of each tree (labkit's
    :class:`~labkit.grading.cgroups.Cgroup`); raises ``CgroupUnavailable`` with the reason."""
    limits = CgroupLimits(cpu=cpu, memory_bytes=memory_mb * 1024 * 1024)
    group = Cgroup.make(limits, root=CGROUP_ROOT, below_own=False, prefix="labkit-small")
    try:
        yield group
    finally:
        group.remove()


@dataclass
class Grading:
    """One ``labkit grade`` of one submission inside the cgroup."""

    submission: str
    run: int
    expected: set[str]
    failed: set[str] = field(default_factory=set)
    inconclusive: set[str] = field(default_factory=set)
    score: float | None = None
    max_score: float | None = None
    problem: str | None = None
    elapsed_s: float = 0.0
    peak_memory_mb: float | None = None
    throttled_s: float | None = None
    oom_kills: int = 0
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def as_expected(self) -> bool:
        return self.problem is None and self.failed == self.expected

    def unexpected(self) -> list[str]:
        """The verdict and evidence of each check that went the wrong way (or was inconclusive)."""
        lines = []
        for check_id, check in self.report.get("checks", {}).items():
            wrong = (check_id in self.failed) != (check_id in self.expected)
            if wrong or check_id in self.inconclusive:
                lines.append(
                    f"    {check['status'].upper()} {check_id}: {check['verdict']} "
                    f"{json.dumps(check['evidence'])}"
                )
        return lines


def submissions(
    folder: Path, only: Sequence[str] | None = None
) -> dict[str, tuple[Path, set[str]]]:
    """The references and every broken proxy (written into ``folder``), with expected failures."""
    sys.path.insert(0, str(ROOT / "tests" / "grading"))
    sys.path.insert(0, str(ROOT))
    support = importlib.import_module("grading_support")  # tests/grading: the broken proxies

    chosen: dict[str, tuple[Path, set[str]]] = {n: (p, set()) for n, p in REFERENCES.items()}
    for name in support.LAB_VARIANTS:  # a grading here runs the lab's checks
        if only is None or name in only:
            chosen[name] = (support.write_variant(name, folder), support.lab_failures(name))
    if only is not None:
        chosen = {n: v for n, v in chosen.items() if n in only}
        unknown = set(only) - set(chosen)
        if unknown:
            raise SystemExit(f"unknown submissions: {sorted(unknown)}")
    return chosen


def grade_in(group: Cgroup, path: Path, *, only: Sequence[str] | None = None) -> dict[str, Any]:
    """``labkit grade PATH --json`` with its process in ``group``; the report as a dict.

    A shell joins the cgroup and then execs the grader (rather than a ``preexec_fn``, which is
    not safe when several gradings start from threads), so every process the grader starts is
    in the cgroup from its first instruction.
    """
    command = [str(ROOT / ".venv" / "bin" / "labkit"), "grade", str(path), "--json"]
    if only:
        command += ["--only", *only]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*group.join_prefix(), *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=GRADE_TIMEOUT_S,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"labkit grade exited {done.returncode}: {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def grade_once(
    name: str, path: Path, expected: set[str], run: int, *, cpu: float, memory_mb: int
) -> Grading:
    """Grade ``path`` once in a cgroup of its own (so its peak memory is its own)."""
    with small_cgroup(cpu, memory_mb) as group:
        started = time.monotonic()
        report = grade_in(group, path)
        grading = Grading(name, run, expected, elapsed_s=time.monotonic() - started, report=report)
        grading.peak_memory_mb = group.peak_memory_mb()
        grading.throttled_s = group.throttled_s()
        grading.oom_kills = group.oom_kills()
    checks = report.get("checks", {})
    grading.failed = {i for i, c in checks.items() if c["status"] == "failed"}
    grading.inconclusive = {
        i
        for i, c in checks.items()
        if c["status"] == "skipped" and c["evidence"].get("inconclusive")
    }
    grading.score, grading.max_score = report.get("score"), report.get("max_score")
    problem = report.get("problem")
    grading.problem = None if problem is None else problem.get("kind")
    return grading


def grade_all(
    chosen: dict[str, tuple[Path, set[str]]],
    *,
    runs: int = 1,
    cpu: float = 0.5,
    memory_mb: int = 768,
    jobs: int = 1,
    log: Callable[[str], None] | None = None,
) -> list[Grading]:
    """Every submission ``runs`` times, ``jobs`` gradings at once (each in its own cgroup)."""
    work = [(run, name) for run in range(1, runs + 1) for name in chosen]

    def one(item: tuple[int, str]) -> Grading:
        run, name = item
        path, expected = chosen[name]
        grading = grade_once(name, path, expected, run, cpu=cpu, memory_mb=memory_mb)
        if log is not None:
            log(
                f"run {run} {name}: {'ok' if grading.as_expected else 'NOT AS EXPECTED'} "
                f"failed={sorted(grading.failed)} inconclusive={sorted(grading.inconclusive)} "
                f"{grading.elapsed_s:.1f} s"
            )
        return grading

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, work))


def render(gradings: Sequence[Grading]) -> str:
    names = list(dict.fromkeys(g.submission for g in gradings))
    width = max(len(n) for n in names)
    lines = [f"{'submission':<{width}}  run  ok  score    failed (expected)  inconclusive  s  MB"]
    for g in gradings:
        failed = ",".join(sorted(g.failed)) or "-"
        expected = ",".join(sorted(g.expected)) or "-"
        score = f"{g.score:g}/{g.max_score:g}" if g.score is not None else "-"
        lines.append(
            f"{g.submission:<{width}}  {g.run:>3}  {'ok' if g.as_expected else 'NO'}  {score:<7}  "
            f"{failed} ({expected})  {','.join(sorted(g.inconclusive)) or '-'}  "
            f"{g.elapsed_s:.1f}  {g.peak_memory_mb or 0:.0f}"
            + (f"  problem={g.problem}" if g.problem else "")
        )
    wrong = [g for g in gradings if not g.as_expected or g.inconclusive]
    if wrong:
        lines.append("")
        lines.append("unexpected or inconclusive verdicts:")
        for g in wrong:
            lines.append(f"  {g.submission} run {g.run}:")
            lines += g.unexpected()
    good = sum(g.as_expected for g in gradings)
    lines.append(f"\n{good} of {len(gradings)} gradings as expected")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.small_container")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", type=float, default=0.5, help="CPUs (0.5 = 50000/100000)")
    parser.add_argument("--memory-mb", type=int, default=768)
    parser.add_argument("--only", nargs="+", help="submission names (reference, no_cancel, ...)")
    parser.add_argument("--out", help="JSON results file (default bench/results/...)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="gradings at once, each in its own cgroup (default 1)"
    )
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="labkit-small-"))
    try:
        chosen = submissions(folder, args.only)
        with small_cgroup(args.cpu, args.memory_mb) as group:  # fails early, with the reason
            print(f"cgroup v{group.version}: {args.cpu:g} CPU, {args.memory_mb} MiB each")
        gradings = grade_all(
            chosen,
            runs=args.runs,
            cpu=args.cpu,
            memory_mb=args.memory_mb,
            jobs=args.jobs,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except CgroupUnavailable as exc:
        print(f"small_container: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(render(gradings))
    out = (
        Path(args.out)
        if args.out
        else RESULTS / f"small-container-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "cpu": args.cpu,
                "memory_mb": args.memory_mb,
                "gradings": [
                    {
                        "submission": g.submission,
                        "run": g.run,
                        "as_expected": g.as_expected,
                        "failed": sorted(g.failed),
                        "expected": sorted(g.expected),
                        "inconclusive": sorted(g.inconclusive),
                        "score": g.score,
                        "problem": g.problem,
                        "elapsed_s": round(g.elapsed_s, 2),
                        "peak_memory_mb": g.peak_memory_mb,
                        "throttled_s": g.throttled_s,
                        "oom_kills": g.oom_kills,
                        "report": g.report,
                    }
                    for g in gradings
                ],
            },
            indent=1,
        )
        + "\n"
    )
    print(f"results: {out}", file=sys.stderr)
    return 0 if all(g.as_expected for g in gradings) else 1


if __name__ == "__main__":
    sys.exit(main())
