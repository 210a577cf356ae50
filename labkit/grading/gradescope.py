"""Gradescope: grade the file in ``submission/`` and always leave a ``results/results.json``.

Gradescope runs ``run_autograder`` once per submission in a fresh container, with the
learner's upload in ``$AUTOGRADER_ROOT/submission`` (default ``/autograder``): ``proxy.py``
with the ``notebooks/`` folder beside it, or the ``submission.zip`` that ``make submit`` writes
(``proxy.py`` alone is graded too, its notebook parts 0 saying what to upload). It reads
``results/results.json`` afterwards. When that file is missing or not JSON, all the learner sees
is "The autograder failed to execute correctly", so ``run`` writes one in every case: score 0
and a plain message for nothing submitted, a notebook instead of ``proxy.py``, a syntax or
import error, and a crash of the grader itself. One case gets no score at all: a grader whose
grading user cannot start Python with what a proxy needs (``labkit.grading.environment``),
where every proxy would die through no fault of the learner's. Its results say so, to the
learner and to the instructor, and ``main`` exits 3 (``ExitCode.MACHINE``: this machine lacks
a grader that can run; ``run_autograder`` passes it on).

``python -m labkit.grading.gradescope [--root DIR] [--rubric TOML] [--course DIR]`` is what
``run_autograder`` calls (see ``labkit.grading.autograder`` for the zip that carries it);
``labkit grade FILE --gradescope PATH`` writes its results with the same ``results_for`` and
``write_results``. The learner bundle's ``make grade`` runs the same command on the learner's
own ``submission.zip`` (in ``autograder/submission/``, with the bundle's rubric and planned
course), adding ``--show`` (the tests as a table, ``results_table``, and exit status 1 unless
every test passed) and ``--feedback PATH`` (the feedback Markdown Gradescope shows, as a file):
the learner sees the score, the verdicts and the feedback Gradescope will give them.

Each check is one test worth its share of ``max_score`` in whole cents (``Rubric.allot``), so
the tests add up to exactly the total shown; the assignment's points in Gradescope should be
set to the rubric's ``max_score`` (``labkit autograder gradescope`` prints it). A check the
grader's machine could not decide is not shown as passed: its test is marked failed and named
``(not decided)``, worth 0 of 0 when the rubric leaves it out (the default) or its full share
when the rubric awards it; it never costs the learner a point.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.checks import CheckResult
from labkit.checks.result import MARKS
from labkit.errors import (
    ExitCode,
    GraderEnvironmentError,
    GradingError,
    NotGradable,
    run_command,
)
from labkit.grading.environment import require_environment
from labkit.grading.report import SubmissionReport, feedback_markdown, summary_of
from labkit.grading.roster import Submission, grade_in_worker, notebooks_beside, proxy_from_zip
from labkit.grading.rubric import Rubric

__all__ = [
    "DEFAULT_ROOT",
    "ENVIRONMENT_BROKEN",
    "Found",
    "NotGradable",
    "environment_results",
    "find_submission",
    "main",
    "message_results",
    "results_for",
    "results_table",
    "run",
    "write_results",
]

DEFAULT_ROOT = Path("/autograder")
EXPECTED = "proxy.py"
SKIPPED_DIRS = {".git", ".ipynb_checkpoints", "__pycache__", ".venv", "venv", "node_modules"}
# The learner bundle's own packages, uploaded with a whole repository, and the folder its
# `make grade` grades in: never the submission.
BUNDLE_PACKAGES = {"labkit", "mock_upstream", "notebooks", "binder", ".github", "autograder"}
TTFT_BOARD = "TTFT added by the proxy (ms)"
NOT_DECIDED = "not decided"


@dataclass(frozen=True)
class Found:
    path: Path
    note: str = ""  # said in the feedback when the file was not called proxy.py


def _files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if any(p in SKIPPED_DIRS for p in parts) or parts[0] in BUNDLE_PACKAGES:
            continue
        if path.is_file():
            found.append(path)
    return found


def find_submission(folder: Path) -> Found:
    """The file to grade in ``folder``: ``proxy.py`` (the shallowest), else the ``proxy.py`` of
    its zip (``make submit``'s ``submission.zip``, unpacked: proxy.py and notebooks/), else its
    only ``.py`` file. Raises ``NotGradable`` with what to upload instead."""
    files = _files(folder) if folder.is_dir() else []
    proxies = sorted((p for p in files if p.name == EXPECTED), key=lambda p: len(p.parts))
    if proxies:
        return Found(proxies[0])
    zips = [p for p in files if p.suffix == ".zip"]
    if len(zips) == 1:
        try:
            return Found(proxy_from_zip(zips[0]))
        except GradingError as exc:
            raise NotGradable(
                f"Your upload {zips[0].name} could not be graded: {exc} Upload the "
                f"submission.zip that `make submit` writes, or {EXPECTED} with your notebooks/ "
                "folder."
            ) from None
    python = [p for p in files if p.suffix == ".py"]
    if len(python) == 1:
        return Found(
            python[0],
            f"There was no {EXPECTED}, so {python[0].relative_to(folder)} was graded as your "
            f"proxy. Name it {EXPECTED} next time.",
        )
    if len(python) > 1:
        listed = ", ".join(str(p.relative_to(folder)) for p in python[:6])
        raise NotGradable(
            f"Your upload has no {EXPECTED} but several Python files ({listed}), and the "
            f"grader cannot tell which is your proxy. Rename yours to {EXPECTED} and upload "
            "it again."
        )
    if any(p.suffix == ".ipynb" for p in files):
        raise NotGradable(
            f"You uploaded a notebook. The grader grades {EXPECTED}, the file your notebooks' "
            f"build-it cells wrote (next to the notebooks folder; `make grade` grades the same "
            f"file), with your notebooks/ folder beside it. Upload both, or the submission.zip "
            "that `make submit` writes."
        )
    if not files:
        raise NotGradable(
            f"Nothing was submitted. Upload {EXPECTED}, the file your notebooks' build-it "
            "cells wrote."
        )
    listed = ", ".join(str(p.relative_to(folder)) for p in files[:6])
    raise NotGradable(
        f"Your upload ({listed}) has no Python file. Upload {EXPECTED}, the file your "
        "notebooks' build-it cells wrote."
    )


def message_results(message: str, started: float) -> dict[str, Any]:
    """Results with no tests: score 0 and ``message`` for the learner."""
    return {
        "score": 0,
        "output": message,
        "execution_time": round(time.monotonic() - started),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [],
    }


ENVIRONMENT_BROKEN = (
    "Your file was not graded, and no score was given: the grader's own environment is broken "
    "(it could not start Python as the user that runs your proxy). That is not a verdict on "
    "your proxy and nothing for you to fix. Tell your instructor; once the autograder is "
    "fixed, your submission can be graded again."
)


def environment_results(error: GraderEnvironmentError, started: float) -> dict[str, Any]:
    """Results without a score: the grader's environment is broken, said to the learner, then
    the whole error for the instructor. No ``score`` and no ``tests`` (whose scores Gradescope
    would add up to one): Gradescope's specification needs one or the other, so no grade can be
    read from this file, and the run shows as a failed autograder run rather than a 0 (read
    from the specification; not tried on Gradescope itself)."""
    return {
        "output": f"{ENVIRONMENT_BROKEN}\n\nFor your instructor: {error}",
        "execution_time": round(time.monotonic() - started),
        "visibility": "visible",
        "stdout_visibility": "hidden",
    }


def _leaderboard(report: SubmissionReport) -> list[dict[str, Any]]:
    trickle = report.result("trickle")
    if trickle is None or not trickle.passed:
        return []
    lag = trickle.evidence.get("first_token_lag_ms")
    if not isinstance(lag, int | float):
        return []
    return [{"name": TTFT_BOARD, "value": round(float(lag), 1), "order": "asc"}]


def _evidence(result: CheckResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in result.evidence.items()) or "nothing measurable"


def _test(report: SubmissionReport, result: CheckResult) -> dict[str, Any]:
    """One Gradescope test for ``result``, worth what ``report.points`` gives it."""
    available = report.points.get(result.id, 0.0)
    name = f"{result.id}: {summary_of(result.id)}"
    output = result.verdict + (f"\nwarning: {result.warning}" if result.warning else "")
    if result.status == "failed":
        output += f"\nObserved: {_evidence(result)}\nWhat to change: {result.hint}"
    elif result.warning and not result.skipped:
        output += f"\nObserved: {_evidence(result)}"
    if result.inconclusive:
        name += f" ({NOT_DECIDED})"
        worth = "was given its full points" if report.earned(result) else "is left out of it"
        output = (
            f"Not decided: the grader's machine was too slow to run this experiment to the end. "
            f"That is not your proxy's fault, and it {worth}; it never counts against you.\n"
            f"{output}\nObserved: {_evidence(result)}"
        )
    return {
        "name": name,
        "score": available if report.earned(result) else 0.0,
        "max_score": available,
        "status": "passed" if result.passed else "failed",
        "output": output,
        "visibility": "visible",
    }


def results_for(report: SubmissionReport, note: str = "") -> dict[str, Any]:
    """Gradescope's results for a graded file: one test per counted or undecided check, in
    whole cents that add up to exactly the score; the feedback as Markdown; and the time the
    proxy added to the first token on the leaderboard."""
    shown = copy.copy(report)  # the same grade, its points in whole cents
    counted = [r.id for r in report.results if report.counts(r)]
    shown.points = report.rubric.allot(counted)
    tests = [_test(shown, r) for r in shown.results if not r.skipped or r.inconclusive]
    feedback = feedback_markdown(shown)
    if report.problem is not None:  # why it could not be graded, first, in one line
        feedback = f"{report.problem.message}\n\n{feedback}"
    results: dict[str, Any] = {
        "score": round(sum(t["score"] for t in tests), 2),
        "execution_time": round(report.elapsed_s),
        "output": f"{note}\n\n{feedback}" if note else feedback,
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    board = _leaderboard(report)
    if board:
        results["leaderboard"] = board
    return results


def write_results(target: Path, results: dict[str, Any]) -> None:
    """Write ``results`` as Gradescope reads them, creating the folder."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def run(root: Path, rubric_path: str | None = None, course: Path | None = None) -> dict[str, Any]:
    """Grade ``root/submission`` and write ``root/results/results.json``; returns what it
    wrote. With ``course`` (the planned course the autograder zip carries) the in-notebook
    parts are graded too: from the ``notebooks/`` beside ``proxy.py``, else each scores 0
    saying what to upload. When the grading user cannot start Python with what a proxy needs
    (``environment.require_environment``), the results hold no score
    (``environment_results``). Never raises for anything the submission or the grader does."""
    started = time.monotonic()
    target = root / "results" / "results.json"
    try:
        rubric = Rubric.load(rubric_path)
        found = find_submission(root / "submission")
        notebooks = notebooks_beside(found.path) if course is not None else None
        submission = Submission(found.path.name, found.path, notebooks, parts=course is not None)
        require_environment()
        report = grade_in_worker(submission, rubric, rubric_path=rubric_path, course=course)
        results = results_for(report, found.note)
    except NotGradable as exc:
        results = message_results(str(exc), started)
    except GraderEnvironmentError as exc:  # the grader's fault: no score for the learner
        results = environment_results(exc, started)
    except Exception:  # the grader's own failure: still a results file, and the log says why
        traceback.print_exc()
        results = message_results(
            "The grader itself failed before it could grade your file; this is not a verdict "
            "on your proxy. Tell your instructor (the run's log has the details) and submit "
            "again later.",
            started,
        )
    write_results(target, results)
    return results


def _mark(test: dict[str, Any]) -> str:
    if test["status"] == "passed":
        return MARKS["passed"]
    return MARKS["inconclusive"] if test["name"].endswith(f"({NOT_DECIDED})") else MARKS["failed"]


def results_table(results: dict[str, Any]) -> str:
    """``results`` for a terminal: one line per test as Gradescope lists it (its mark, its
    points, its name) with the test's output under it, then the score; the message alone when
    the results hold no tests. Read from the results alone, so it shows what Gradescope will."""
    tests: list[dict[str, Any]] = results.get("tests", [])
    if not tests:
        return str(results.get("output", ""))
    points = [f"{t['score']:g}/{t['max_score']:g}" for t in tests]
    width = max(len(p) for p in points)
    lines = []
    for test, shown in zip(tests, points, strict=True):
        lines.append(f"  {_mark(test)}  {shown:>{width}}  {test['name']}")
        lines += [f"        {line}" for line in str(test["output"]).splitlines() if line]
    passed = sum(t["status"] == "passed" for t in tests)
    top = sum(t["max_score"] for t in tests)
    lines.append(
        f"Score: {results['score']:g}/{round(top, 2):g} ({passed} of {len(tests)} tests passed)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.grading.gradescope")
    parser.add_argument(
        "--root",
        default=os.environ.get("AUTOGRADER_ROOT", str(DEFAULT_ROOT)),
        help="the autograder folder (default: $AUTOGRADER_ROOT, else /autograder)",
    )
    parser.add_argument("--rubric", help="the rubric TOML shipped in the autograder zip")
    parser.add_argument(
        "--course", help="the planned course the zip carries: grade the notebook parts too"
    )
    parser.add_argument(
        "--show",
        action="store_true",
        help="print every test with its verdict, and exit 1 unless every test passed (the "
        "learner bundle's `make grade`)",
    )
    parser.add_argument(
        "--feedback", metavar="PATH", help="also write the feedback Gradescope shows (Markdown)"
    )
    args = parser.parse_args(argv)
    return run_command(lambda: _grade_and_show(args))


def _grade_and_show(args: argparse.Namespace) -> int:
    """``run`` as ``main``'s ``args`` say, and what it found on the terminal: 0 when graded
    (with ``--show``: 1 unless every test passed), ``GraderEnvironmentError``'s exit code when
    the grader could not grade at all."""
    course = Path(args.course) if args.course else None
    results = run(Path(args.root), args.rubric, course)
    written = Path(args.root) / "results" / "results.json"
    if args.feedback:
        feedback = Path(args.feedback)
        feedback.parent.mkdir(parents=True, exist_ok=True)
        feedback.write_text(str(results["output"]).rstrip("\n") + "\n", encoding="utf-8")
    if "score" not in results:  # the grader's environment is broken: not graded
        print(f"error: not graded, no score written to {written}", file=sys.stderr)
        print(results["output"], file=sys.stderr)
        return GraderEnvironmentError.exit_code
    if not args.show:
        print(f"score {results['score']}; wrote {written}")
        return ExitCode.PASSED
    print(results_table(results))
    also = f" and {args.feedback}, the feedback it shows" if args.feedback else ""
    print(f"Wrote {written}, Gradescope's results for this grade{also}.")
    tests = results["tests"]
    passed = tests and all(t["status"] == "passed" for t in tests)
    return ExitCode.PASSED if passed else ExitCode.CHECK_FAILED


if __name__ == "__main__":
    sys.exit(main())
