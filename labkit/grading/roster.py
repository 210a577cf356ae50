"""Grade many submissions: find them, run them in parallel worker processes, collect reports.

Each submission is graded by ``python -m labkit.grading.worker`` in its own process, with a
stripped environment and a hard time limit, so a submission that hangs, crashes or floods
memory costs only its own slot. The worker prints one typed ``WorkerOutcome``: a report, or a
setup error that becomes ``GradingError`` here. ``jobs`` workers run at once (default: the
cores this process may use).

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
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from labkit.checks.catalogue import select
from labkit.checks.machine import Budget, cpu_limit
from labkit.errors import GradingError
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
]

WORKER_GRACE_S = 20.0  # on top of the rubric's submission limit: process start-up and cleanup


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


def proxy_from_zip(archive: Path) -> Path:
    """The ``proxy.py`` of a learner's zip (at its top or in one folder), copied out to a
    temporary file: only that file is read, whatever else the zip holds."""
    try:
        with zipfile.ZipFile(archive) as opened:
            members = [
                info
                for info in opened.infolist()
                if PurePosixPath(info.filename).name == "proxy.py"
                and len(PurePosixPath(info.filename).parts) <= 2
            ]
            if not members:
                raise GradingError(
                    f"{archive} holds no proxy.py (at its top, or in one folder): ask the "
                    "learner for a zip made by `make submit`."
                )
            chosen = min(members, key=lambda info: len(info.filename))
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
        if given.is_file():
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
) -> SubmissionReport:
    """Grade one submission in a worker process (against the real engine at ``engine_url``,
    if given; its notebook parts, if it has them, by the course in ``course``, default
    ``notebook_grader.course_dir()``, their runner forked by the class's ``zygote`` if there
    is one), stopped after the time ``budget``'s machine allows (default: this one's). Raises
    ``GradingError`` on a setup failure."""
    ids = select(only)
    machine = Budget.given_or_here(budget)
    command = [sys.executable, "-m", "labkit.grading.worker", str(submission.path.resolve())]
    command += ["--name", submission.learner]
    if rubric_path is not None:
        command += ["--rubric", str(Path(rubric_path).resolve())]
    if only:
        command += ["--only", *only]
    if engine_url is not None:
        command += ["--engine", engine_url]
    limit = rubric.time_limit_s(ids, engine=engine_url is not None, budget=machine)
    limit += WORKER_GRACE_S
    if submission.parts:
        # imported here: IPython and nbformat only when notebooks are graded
        from labkit.grading.notebook_grader import course_dir, notebook_time_limit_s

        course = course or course_dir()
        command += ["--course", str(course.resolve())]
        if submission.notebooks is not None:
            command += ["--notebooks", str(submission.notebooks.resolve())]
        if zygote is not None:
            command += ["--zygote", zygote]
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
            return _failed(submission, rubric, ids, problem, time.monotonic() - started, course)
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
        return _failed(submission, rubric, ids, problem, time.monotonic() - started, course)
    raise GradingError(outcome.error)  # "setup_error": the CLI prints it after "error: "


def _failed(
    submission: Submission,
    rubric: Rubric,
    ids: Sequence[str],
    problem: Problem,
    elapsed: float,
    course: Path | None = None,
) -> SubmissionReport:
    from labkit.checks import CheckResult

    results = [
        CheckResult(i, False, "not run: grading was stopped", {}, "see the problem above.")
        for i in ids
    ]
    if submission.parts:  # the parts too, so that every learner's total is out of the same
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

    ``on_done(n, report)`` is called as each finishes (n counts from 1), for progress;
    ``on_note(text)`` with what the instructor should know about how the class is graded.
    """
    reports: dict[int, SubmissionReport] = {}
    budget = Budget.here()  # read once: every worker's time limit is set for this machine
    with contextlib.ExitStack() as stack:
        zygote = _zygote(submissions, budget, on_note or (lambda _: None))
        if zygote is not None:
            stack.callback(zygote.stop)
        path = zygote.path if zygote is not None else None
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=jobs or default_jobs()))
        futures = {
            pool.submit(
                grade_in_worker,
                s,
                rubric,
                rubric_path=rubric_path,
                only=only,
                budget=budget,
                zygote=path,
            ): i
            for i, s in enumerate(submissions)
        }
        for done, future in enumerate(as_completed(futures), start=1):
            report = future.result()
            reports[futures[future]] = report
            if on_done is not None:
                on_done(done, report)
    return [reports[i] for i in range(len(submissions))]


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
