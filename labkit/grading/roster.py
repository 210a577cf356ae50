"""Grade many submissions: find them, run them in parallel worker processes, collect reports.

Each submission is graded by ``python -m labkit.grading.worker`` in its own process, with a
stripped environment and a hard time limit, so a submission that hangs, crashes or floods
memory costs only its own slot. The worker prints one typed ``WorkerOutcome``: a report, or a
setup error that becomes ``GradingError`` here. ``jobs`` workers run at once (default: the
cores this process may use); a class handing in notebooks also runs its learners' notebook
parts in workers of their own, beside those (``grade_many``).

Submissions are ``.py`` files, folders holding a ``proxy.py``, or ``.zip`` files holding one
(the folder or zip names the learner); a folder given on the command line is searched one
level deep for them. A folder or zip may hold ``notebooks/`` beside ``proxy.py`` (what
``make submit`` zips): when any entry does, every learner's in-notebook parts are graded too
(``labkit.grading.notebook_grader``), and an entry without notebooks scores 0 on each part with
a verdict saying what to upload.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Literal

from labkit.checks.catalogue import select
from labkit.checks.machine import Budget, cpu_limit
from labkit.errors import GradingError, RelayedError
from labkit.grading.environment import require_environment
from labkit.grading.report import Problem, SubmissionReport
from labkit.grading.rubric import Rubric
from labkit.grading.sandbox import clean_env
from labkit.grading.worker import WorkerOutcome
from labkit.grading.zygote import Zygote

__all__ = [
    "GradingError",
    "Submission",
    "default_jobs",
    "find_submissions",
    "grade_in_worker",
    "grade_many",
    "notebooks_beside",
    "proxy_from_zip",
    "proxy_in_zip",
]

WORKER_GRACE_S = 20.0  # on top of the rubric's submission limit: process start-up and cleanup
# A class's notebook-part lanes per job: a learner's notebooks mostly wait on the servers they
# start (about 5 s of CPU in 18 to 24 s), so as many lanes as the checks' leave the CPUs idle
# and the class waits on its notebooks (docs/measurements.md, issue 30).
PARTS_LANES_PER_JOB = 2
# What one worker grades of a submission: everything, proxy.py's checks, or the notebook parts.
Half = Literal["both", "proxy", "parts"]


@dataclass(frozen=True)
class Submission:
    """One learner's work: ``path`` their ``proxy.py``; with ``parts``, their in-notebook parts
    are graded too, from the folder ``notebooks`` (``None``: they handed in none)."""

    learner: str
    path: Path
    notebooks: Path | None = None
    parts: bool = False


def default_jobs() -> int:
    """One grading per CPU this process may use: its cgroup quota counts (a pod limited to two
    CPUs on a 64-core node grades two at a time), and never fewer than one."""
    return max(1, int(cpu_limit()))


MAX_PROXY_BYTES = 1024 * 1024
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024  # a notebook bigger than this in a zip is not read
_NOTEBOOK = re.compile(r"^(?:[^/]+/)?notebooks/(\d\d_\w+\.ipynb)$")
_UNZIPPED: list[tempfile.TemporaryDirectory[str]] = []  # removed when the process ends


def proxy_in_zip(opened: zipfile.ZipFile) -> zipfile.ZipInfo | None:
    """The zip's ``proxy.py``: at its top, or in one folder (``ana/proxy.py``, as ``make
    submit`` zips it), the shortest such path; ``None`` when it holds none."""
    members = [
        info
        for info in opened.infolist()
        if PurePosixPath(info.filename).name == "proxy.py"
        and len(PurePosixPath(info.filename).parts) <= 2
    ]
    return min(members, key=lambda info: len(info.filename), default=None)


def proxy_from_zip(archive: Path) -> Path:
    """The ``proxy.py`` of a learner's zip (``proxy_in_zip``), copied out to a temporary file:
    only that file is read, whatever else the zip holds."""
    try:
        with zipfile.ZipFile(archive) as opened:
            chosen = proxy_in_zip(opened)
            if chosen is None:
                raise GradingError(
                    f"{archive} holds no proxy.py (at its top, or in one folder): ask the "
                    "learner for a zip made by `make submit`."
                )
            if chosen.file_size > MAX_PROXY_BYTES:
                raise GradingError(f"{archive}'s proxy.py is over 1 MB: it is not a proxy.py.")
            source = opened.read(chosen)
    except zipfile.BadZipFile as exc:
        raise GradingError(f"{archive} is not a readable zip ({exc}): ask for it again.") from None
    folder = tempfile.TemporaryDirectory(prefix="labkit-zip-")
    _UNZIPPED.append(folder)
    target = Path(folder.name) / archive.stem / "proxy.py"
    target.parent.mkdir()
    target.write_bytes(source)
    _notebooks_from_zip(archive, target.parent / "notebooks")
    return target


def _notebooks_from_zip(archive: Path, target: Path) -> None:
    """The zip's ``notebooks/NN_*.ipynb`` (at its top, or in one folder) copied into ``target``;
    nothing else of the zip is read."""
    with zipfile.ZipFile(archive) as opened:
        for info in opened.infolist():
            match = _NOTEBOOK.match(info.filename)
            if match and info.file_size <= MAX_NOTEBOOK_BYTES:
                target.mkdir(exist_ok=True)
                (target / match.group(1)).write_bytes(opened.read(info))


def notebooks_beside(proxy: Path) -> Path | None:
    """The ``notebooks/`` folder handed in beside ``proxy``; else the folder of ``proxy`` itself
    when the course's notebooks (``NN_*.ipynb``) lie next to it (an upload of loose files);
    else ``None``."""
    folder = proxy.parent / "notebooks"
    if folder.is_dir():
        return folder
    return proxy.parent if any(proxy.parent.glob("[0-9][0-9]_*.ipynb")) else None


def find_submissions(paths: Iterable[str | os.PathLike[str]]) -> list[Submission]:
    """Every submission under ``paths``, learner names made unique. Raises ``GradingError``."""
    found: list[Submission] = []
    for given in map(Path, paths):
        if given.is_file() and given.suffix == ".zip":  # one learner's zip, named directly
            proxy = proxy_from_zip(given)
            found.append(Submission(given.stem, proxy, notebooks_beside(proxy)))
        elif given.is_file():
            learner = given.parent.name if given.name == "proxy.py" else given.stem
            found.append(Submission(learner or given.stem, given))
        elif given.is_dir():
            for entry in sorted(given.iterdir()):
                if entry.is_file() and entry.suffix == ".py":
                    found.append(Submission(entry.stem, entry))
                elif entry.is_dir() and (entry / "proxy.py").is_file():
                    proxy = entry / "proxy.py"
                    found.append(Submission(entry.name, proxy, notebooks_beside(proxy)))
                elif entry.is_file() and entry.suffix == ".zip":
                    proxy = proxy_from_zip(entry)
                    found.append(Submission(entry.stem, proxy, notebooks_beside(proxy)))
        else:
            raise GradingError(
                f"Expected a proxy file or a folder of them, got {given}: it "
                "does not exist. Check the path."
            )
    if not found:
        shown = ", ".join(str(p) for p in paths)
        raise GradingError(
            f"Expected .py files or folders holding proxy.py in {shown}, found none. "
            "Point `labkit grade-class` at the folder of submissions."
        )
    seen: dict[str, int] = {}
    unique = []
    parts = any(submission.notebooks is not None for submission in found)
    for submission in found:
        count = seen.get(submission.learner, 0)
        seen[submission.learner] = count + 1
        learner = submission.learner if count == 0 else f"{submission.learner}-{count + 1}"
        unique.append(replace(submission, learner=learner, parts=parts))
    return unique


def grade_in_worker(
    submission: Submission,
    rubric: Rubric,
    *,
    rubric_path: str | None = None,
    only: Sequence[str] | None = None,
    engine_url: str | None = None,
    course: Path | None = None,
    budget: Budget | None = None,
    zygote: str | None = None,
    half: Half = "both",
) -> SubmissionReport:
    """Grade one submission in a worker process (against the real engine at ``engine_url``,
    if given; its notebook parts, if it has them, by the course in ``course``, default
    ``notebook_grader.course_dir()``, their runner forked by the class's ``zygote`` if there
    is one), stopped after the time ``budget``'s machine allows, and graded for that machine:
    the worker gets its CPUs (``--cpus``) and never reads the machine itself. A top-level entry
    point (the CLI's ``labkit grade``, Gradescope's): given no budget, it reads this machine once
    here (``Budget.here()``).
    ``half`` grades only ``proxy.py``'s checks or only the notebook parts (a class grades
    them in lanes of their own: ``grade_many``). Raises ``GradingError`` on a setup failure."""
    ids = [] if half == "parts" else select(only)
    parts = submission.parts and half != "proxy"
    machine = Budget.here() if budget is None else budget  # the top level, given none
    command = [sys.executable, "-m", "labkit.grading.worker", str(submission.path.resolve())]
    command += ["--name", submission.learner, "--cpus", repr(machine.cpus)]
    if rubric_path is not None:
        command += ["--rubric", str(Path(rubric_path).resolve())]
    if only:
        command += ["--only", *only]
    if engine_url is not None:
        command += ["--engine", engine_url]
    limit = WORKER_GRACE_S
    if ids:
        limit += rubric.time_limit_s(ids, engine=engine_url is not None, budget=machine)
    if parts:
        # imported here: IPython and nbformat only when notebooks are graded
        from labkit.grading.notebook_grader import course_dir, notebook_time_limit_s

        course = course or course_dir()
        command += ["--course", str(course.resolve())]
        if submission.notebooks is not None:
            command += ["--notebooks", str(submission.notebooks.resolve())]
        if zygote is not None:
            command += ["--zygote", zygote]
        if half == "parts":
            command += ["--parts-only"]
        limit += notebook_time_limit_s(course, machine)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="labkit-worker-") as home:
        process = subprocess.Popen(
            command,
            env=clean_env(home),
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            problem = Problem(
                "submission_timeout",
                f"grading did not finish within {limit:g} s and was stopped.",
            )
            elapsed = time.monotonic() - started
            return _failed(submission, rubric, ids, problem, elapsed, course, parts)
    try:
        outcome = WorkerOutcome.parse(out)
        if outcome.kind == "report":
            return SubmissionReport.from_json(outcome.report, rubric)
    except (ValueError, KeyError, TypeError):
        tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-15:])
        problem = Problem(
            "grader_crashed",
            f"the grading worker ended without a report (exit status {process.returncode}).",
            tail,
        )
        elapsed = time.monotonic() - started
        return _failed(submission, rubric, ids, problem, elapsed, course, parts)
    # "setup_error": raised again here, to exit as the worker's error would have
    raise RelayedError(outcome.error, cause=outcome.error_kind)


def _failed(
    submission: Submission,
    rubric: Rubric,
    ids: Sequence[str],
    problem: Problem,
    elapsed: float,
    course: Path | None = None,
    parts: bool | None = None,
) -> SubmissionReport:
    """``ids`` and (``parts``, default: the submission's) its notebook parts, each failed as
    not run because of ``problem``."""
    from labkit.checks import CheckResult

    results = [
        CheckResult(i, False, "not run: grading was stopped", {}, "see the problem above.")
        for i in ids
    ]
    # the parts too: every learner's total is out of the same points
    if submission.parts if parts is None else parts:
        from labkit.grading.notebook_grader import course_dir, not_graded
        from labkit.grading.notebook_parts import course_notebooks

        planned = course_notebooks(course or course_dir())
        results += not_graded(planned, "not run: grading was stopped", "see the problem above.")
    return SubmissionReport(
        submission.learner, str(submission.path), results, rubric, problem, elapsed
    )


def grade_many(
    submissions: Sequence[Submission],
    rubric: Rubric,
    *,
    rubric_path: str | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    on_done: Callable[[int, SubmissionReport], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> list[SubmissionReport]:
    """Grade every submission, ``jobs`` at a time; reports in the submissions' order.

    With a zygote (a class handing in notebooks, on a machine that can sandbox a forked
    runner), each learner is graded in two halves, each in lanes of its own: ``proxy.py``'s
    timed checks (``jobs`` lanes), and the notebook parts in their niced runner
    (``PARTS_LANES_PER_JOB`` times as many). A learner's notebooks take longer than their
    proxy's checks and mostly wait on the servers they start; in one lane the next learner's
    checks would wait for them, and the CPUs idle.

    ``on_done(n, report)`` is called as each learner finishes (n counts from 1), for progress;
    ``on_note(text)`` with what the instructor should know about how the class is graded.

    Before anyone is graded, the grading user must be able to start Python with what a proxy
    needs (``environment.require_environment``, once for the class): raises
    ``GraderEnvironmentError`` when it cannot, and no learner gets a score.
    """
    lanes = jobs or default_jobs()
    budget = Budget.here()  # read once: every worker's time limit is set for this machine
    require_environment(budget=budget)
    halves: dict[int, list[Future[SubmissionReport]]] = {}
    reports: dict[int, SubmissionReport] = {}
    with contextlib.ExitStack() as stack:
        zygote = _zygote(submissions, budget, on_note or (lambda _: None))
        if zygote is not None:
            stack.callback(zygote.stop)
        path = zygote.path if zygote is not None else None
        checks = stack.enter_context(ThreadPoolExecutor(lanes, "labkit-checks"))
        parts = stack.enter_context(ThreadPoolExecutor(lanes * PARTS_LANES_PER_JOB, "labkit-parts"))
        futures: dict[Future[SubmissionReport], int] = {}
        for i, s in enumerate(submissions):
            split = path is not None and s.parts
            plan: list[tuple[ThreadPoolExecutor, Half]] = (
                [(checks, "proxy"), (parts, "parts")] if split else [(checks, "both")]
            )
            halves[i] = []
            for pool, half in plan:
                future = pool.submit(
                    grade_in_worker,
                    s,
                    rubric,
                    rubric_path=rubric_path,
                    only=only,
                    budget=budget,
                    zygote=path,
                    half=half,
                )
                futures[future] = i
                halves[i].append(future)
        for future in as_completed(futures):
            i = futures[future]
            if i in reports or not all(half.done() for half in halves[i]):
                continue
            reports[i] = _joined([half.result() for half in halves[i]])
            if on_done is not None:
                on_done(len(reports), reports[i])
    return [reports[i] for i in range(len(submissions))]


def _joined(halves: list[SubmissionReport]) -> SubmissionReport:
    """One learner's report from the reports of their halves, in order (``proxy.py``'s checks,
    then the notebook parts): every result, the first problem, the time both took."""
    return replace(
        halves[0],
        results=[r for half in halves for r in half.results],
        problem=next((h.problem for h in halves if h.problem is not None), None),
        elapsed_s=sum(h.elapsed_s for h in halves),
    )


def _zygote(
    submissions: Sequence[Submission], budget: Budget, note: Callable[[str], None]
) -> Zygote | None:
    """One pre-imported parent for every learner's notebook runner (``labkit.grading.zygote``)
    when notebooks are graded and a forked child can be sandboxed here; else ``None``, and each
    worker starts its runners through ``bwrap`` as one learner's grading does. Where the
    sandbox is bubblewrap's and the zygote still cannot start, ``note`` is told why."""
    if len(submissions) < 2 or not any(s.parts for s in submissions):
        return None
    from labkit.grading.isolation import choose
    from labkit.grading.notebook_grader import START_BUDGET_S, course_dir, course_modules

    if choose().kind != "bubblewrap":
        return None
    env = clean_env(tempfile.gettempdir(), {"MPLBACKEND": "Agg"})
    started = Zygote.start(course_modules(course_dir()), env, budget.stretch(START_BUDGET_S))
    if isinstance(started, Zygote):
        return started
    note(
        f"Notebook parts: each learner's runner starts on its own through bwrap, because the "
        f"class's shared, pre-imported runner could not start ({started}). The grades are the "
        'same; the class takes longer (docs/instructors.md, "The in-notebook parts").'
    )
    return None
