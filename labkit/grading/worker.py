"""Grade one file in this process and print the outcome as JSON: ``labkit grade``'s worker.

``python -m labkit.grading.worker FILE --cpus CPUS [--name NAME] [--rubric TOML] [--only ID ...]
[--engine URL] [--course DIR [--notebooks DIR] [--zygote SOCKET] [--parts-only]]``

``--cpus`` is the caller's ``Budget`` (``labkit.checks.machine``): the CPUs every time limit of
this grading is set for. The caller read its machine once and set the worker's own time limit
for it; the worker grades for the same machine and never reads it again, so a class graded as
if on half a CPU (``grade_many(..., budget=Budget(cpus=0.5))``) is graded so in every worker.

With ``--course`` (the instructor's notebooks) the learner's in-notebook parts are graded too,
beside ``proxy.py``'s checks, from their notebooks in ``--notebooks`` (none given: they handed in
``proxy.py`` alone, and each part scores 0 saying what to upload); see
``labkit.grading.notebook_grader``. With ``--zygote`` (a class graded at once) their runner
is forked by the class's pre-imported zygote (``labkit.grading.zygote``); with ``--parts-only``
the parts alone are graded (a class grades a learner's two halves in lanes of their own).

The CLI starts it with a stripped environment (``sandbox.clean_env``), so the learner's proxy,
which inherits this environment, never sees the instructor's secrets; and with a hard time
limit, so nothing a submission does can stall the caller. Before it starts anything, the worker
moves into a network namespace of its own with only loopback in it
(``labkit.grading.network``): the mocks and proxies it starts are born there, and learner code
reaches nothing outside this one grading. Grading against a real engine (``--engine``) keeps the
machine's network, since the engine is outside it. Its stdout is one
:class:`WorkerOutcome` as JSON, whose ``kind`` says what it holds: ``report`` (the submission's
report) or ``setup_error`` (grading itself could not be set up: why, and the error's kind, which
the parent raises again as a ``RelayedError`` that exits as this error would have). The exit
status (0, or the error's exit code with the reason on stderr, through ``run_command`` as every
entry point) is for a person running it by hand; the parent reads the outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

from labkit.checks import CheckResult
from labkit.checks.machine import Budget
from labkit.errors import PROBLEM_KINDS, LabkitError, ProblemKind, UsageError, run_command
from labkit.grading.grader import agrade_file
from labkit.grading.network import Network, enter_own_namespace
from labkit.grading.report import SubmissionReport
from labkit.grading.rubric import Rubric

__all__ = ["OutcomeKind", "WorkerOutcome", "main"]

OutcomeKind = Literal["report", "setup_error"]
_KINDS: frozenset[str] = frozenset(get_args(OutcomeKind))


@dataclass(frozen=True)
class WorkerOutcome:
    """What one worker run came to: a report (its JSON), or why grading could not start."""

    kind: OutcomeKind
    report: dict[str, Any] = field(default_factory=dict)
    error: str = ""  # for "setup_error": the reason, as the CLI prints it after "error: "
    error_kind: ProblemKind = "labkit_error"  # for "setup_error": the kind of that error

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "report": self.report,
                "error": self.error,
                "error_kind": self.error_kind,
            }
        )

    @classmethod
    def parse(cls, text: str | bytes) -> WorkerOutcome:
        """The outcome a worker printed. Raises ``ValueError`` for anything else (a worker that
        died before it printed one)."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("kind") not in _KINDS:
            raise ValueError(f"not a worker outcome: {str(data)[:200]!r}")
        report, error = data.get("report", {}), data.get("error", "")
        error_kind = data.get("error_kind", "labkit_error")
        if (
            not isinstance(report, dict)
            or not isinstance(error, str)
            or error_kind not in PROBLEM_KINDS
        ):
            raise ValueError(f"not a worker outcome: {str(data)[:200]!r}")
        return cls(data["kind"], report, error, error_kind)


async def _grade(args: argparse.Namespace, rubric: Rubric, network: Network) -> SubmissionReport:
    """``proxy.py``'s checks and, with ``--course``, the notebook parts beside them (the
    notebooks' checks mostly wait on their own servers, as the proxy's do). One ``Budget``,
    the caller's (``--cpus``), sets the time limits of both."""
    started = time.monotonic()
    budget = Budget(cpus=args.cpus)
    if args.parts_only:
        parts = await _parts(args, budget)
        name = args.name or Path(args.file).name
        return SubmissionReport(name, args.file, parts, rubric, None, time.monotonic() - started)
    graded = agrade_file(
        args.file,
        rubric,
        name=args.name,
        only=args.only,
        engine_url=args.engine,
        network=network,
        budget=budget,
    )
    if not args.course:
        return await graded
    report, parts = await asyncio.gather(graded, _parts(args, budget))
    return replace(report, results=[*report.results, *parts], elapsed_s=time.monotonic() - started)


async def _parts(args: argparse.Namespace, budget: Budget) -> list[CheckResult]:
    """The notebook parts' rows, graded in a thread: their runner is another process."""
    from labkit.grading.notebook_grader import notebook_rows  # IPython: only here

    notebooks = Path(args.notebooks) if args.notebooks else None
    return await asyncio.to_thread(
        notebook_rows, Path(args.course), notebooks, Path(args.file), budget, args.zygote
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.grading.worker")
    parser.add_argument("file")
    parser.add_argument(
        "--cpus",
        type=float,
        required=True,
        help="the CPUs the caller's Budget is for: every time limit is set for them",
    )
    parser.add_argument("--name")
    parser.add_argument("--rubric")
    parser.add_argument("--only", nargs="+")
    parser.add_argument("--engine", metavar="URL", help="grade against this real engine")
    parser.add_argument("--course", help="the instructor's notebooks: grade in-notebook parts")
    parser.add_argument("--notebooks", help="with --course: the learner's notebooks folder")
    parser.add_argument("--zygote", help="with --course: the class's zygote (its socket)")
    parser.add_argument(
        "--parts-only", action="store_true", help="with --course: grade only the notebook parts"
    )
    args = parser.parse_args(argv)
    if args.parts_only and not args.course:
        parser.error("--parts-only grades the notebook parts: give --course DIR too")
    return run_command(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    """Grade as ``args`` say and print the outcome; a setup error is printed as one too, then
    raised for ``run_command`` to show."""
    try:
        network = (
            Network(False, f"grading against the engine at {args.engine}, outside the grading")
            if args.engine
            else enter_own_namespace()
        )
        rubric = Rubric.load(args.rubric)
        report = asyncio.run(_grade(args, rubric, network))
    except (LabkitError, ValueError) as exc:  # ValueError: an unknown check id in --only
        error = exc if isinstance(exc, LabkitError) else UsageError(str(exc))
        outcome = WorkerOutcome("setup_error", error=str(error), error_kind=error.kind)
        sys.stdout.write(outcome.to_json() + "\n")
        raise error from None
    sys.stdout.write(WorkerOutcome("report", report=report.to_json()).to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
