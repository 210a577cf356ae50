"""Grade a learner's in-notebook parts: their notebooks' own checks, run in the grader's sandbox.

``grade_notebook_parts(notebooks, course, proxy=...)`` returns one :class:`CheckResult` per part
of ``course`` (``labkit.grading.notebook_parts``: which cells run, and which checks are parts),
with ids like ``nb08.adapter``, to stand beside ``proxy.py``'s checks in the same report.

How they run: one Python process per learner (``labkit.grading.notebook_runner``), which imports
what the notebooks import once and then forks ``RUNNERS`` children (``CLASS_RUNNERS`` in a class
graded at once), each taking the next notebook from a shared queue when it has finished its last (a
notebook's checks mostly wait on the servers they started; the imports are most of the CPU). It is
started the way the grader starts a proxy (``labkit.grading.isolation``: bubblewrap and a cgroup
when the machine allows, a stripped environment, inside the grading worker's own network
namespace); when a class is graded at once, it is forked instead from the class's pre-imported
zygote and confines itself the same way, in a network namespace of its own
(``labkit.grading.zygote``, ``labkit.grading.confine``). Its folder is a private copy holding only
the learner's ``proxy.py`` (notebooks 11 to 13 serve it) and a ``notebooks/`` to run in, empty but
for each notebook's private ``proxy.py`` as handed out (``NotebookRun.files``: what notebooks 05
and 07's ``%%proxy_part`` cells write into, written afresh for each run); the cells themselves
come in a plan file, so nothing else of the learner's, the instructor's or a classmate's is in
reach. Each notebook has ``NOTEBOOK_BUDGET_S`` (stretched on a slow machine like
every other budget): a notebook that overruns is stopped (the whole process), its parts fail saying
so, and the process starts again for the notebooks still to run. When the process ends, whatever it
left running dies with its PID namespace and cgroup, as a proxy's does.

What each part scores: the verdict its check printed (pass, fail with what the judge saw, or
"not written yet" naming the part and its notebook); 0 with a reason when the notebook was not
handed in, is not a notebook, or its check gave no verdict (the cell error that stopped it is
shown). A learner's function runs in the same interpreter as the instructor's judge that calls
it: the sandbox contains what it does to the machine and to classmates, not what it does to the
judge's verdict; similarity reports and reading the code remain the instructor's check on that.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import labkit
from labkit.checks import CheckResult
from labkit.checks.machine import Budget
from labkit.errors import GradingError
from labkit.grading.confine import Sandbox
from labkit.grading.isolation import (
    MIB,
    NOBODY,
    Confinement,
    Isolation,
    Limits,
    choose,
    readonly_paths,
)
from labkit.grading.notebook_parts import (
    COURSE_FILE,
    CourseNotebook,
    NotebookRun,
    Part,
    course_notebooks,
    graded_stems,
    learner_run,
    notebook_cells,
    without_unread,
)
from labkit.grading.notebook_runner import warm_modules
from labkit.grading.sandbox import clean_env
from labkit.grading.zygote import Spawned, ZygoteClient

__all__ = [
    "CLASS_RUNNERS",
    "NOTEBOOK_BUDGET_S",
    "NOTEBOOK_LIMITS",
    "UPLOAD_HINT",
    "course_dir",
    "course_modules",
    "grade_notebook_parts",
    "not_graded",
    "notebook_rows",
    "notebook_time_limit_s",
]

NOTEBOOK_BUDGET_S = 60.0  # one notebook's graded cells, at one CPU or more
START_BUDGET_S = 60.0  # the runner's imports, before its first notebook starts
NICENESS = 10  # below the proxy's checks, which run beside the notebooks and are timed
POLL_S = 0.1
RUNNERS = 3  # notebooks graded side by side for one learner (forked after the imports)
# In a class graded at once (a zygote), the workers keep the CPUs busy already, and three runners
# a learner, started together beside the class's timed proxy checks, cost some learners a verdict
# they earned: one runner, and the class's notebook-part lanes (``roster.PARTS_LANES_PER_JOB``)
# keep several learners' notebooks going at once instead (docs/measurements.md, issue 30).
CLASS_RUNNERS = 1
# The notebooks serve the learner's proxy (two to four processes), nginx and a mock in one tree.
NOTEBOOK_LIMITS = Limits(memory_bytes=1536 * MIB, processes=512)
UPLOAD_HINT = "hand in notebooks/ beside proxy.py: `make submit` writes a zip of both."
MAX_SAW = 400


def course_dir() -> Path:
    """The instructor's notebooks: the course planned into a packaged grader's ``bundle_files``
    (``notebook_parts.write_course``), else this repository's ``notebooks/``, beside the
    installed ``labkit``. Raises ``GradingError`` when labkit is installed without them."""
    packaged = Path(labkit.__file__).resolve().parent / "bundle_files"
    if (packaged / COURSE_FILE).is_file():  # a grader packaged for a platform carries its course
        return packaged
    folder = Path(labkit.__file__).resolve().parents[1] / "notebooks"
    if not any(folder.glob("[0-9][0-9]_*.ipynb")):
        raise GradingError(
            f"Expected the instructor's notebooks in {folder} to grade the in-notebook parts, "
            "found none. Grade from a checkout of the lab's repository (its notebooks/ holds "
            "the check cells), or hand in proxy.py files alone."
        )
    return folder


def course_modules(folder: Path) -> list[str]:
    """What the graded cells of the course in ``folder`` import: what a class's zygote
    imports once for every learner's runner (``labkit.grading.zygote``)."""
    cells = [
        cell
        for nb in course_notebooks(folder)
        for cell in without_unread([(c.role, c.source) for c in nb.cells])
    ]
    return warm_modules(cells)


def notebook_time_limit_s(folder: Path | None, budget: Budget) -> float:
    """The longest the notebook parts of one learner may take, on the grading's machine
    (``budget``, the caller's; ``folder`` None: ``course_dir()``)."""
    folder = folder or course_dir()
    return budget.stretch(START_BUDGET_S + NOTEBOOK_BUDGET_S * len(graded_stems(folder)))


def _hint(part: Part, what: str) -> str:
    return f"in notebook {part.notebook}, {what}; then hand in notebooks/ again."


def not_graded(course: Sequence[CourseNotebook], verdict: str, hint: str) -> list[CheckResult]:
    """Every part of ``course`` failed with ``verdict`` (nothing was run)."""
    return [CheckResult(p.id, False, verdict, {}, hint) for nb in course for p in nb.parts]


def _from_verdict(part: Part, event: dict[str, Any]) -> CheckResult:
    missing = [(str(m["part"]), str(m["notebook"])) for m in event.get("missing", [])]
    if missing:
        by_notebook: dict[str, list[str]] = {}
        for name, notebook in missing:
            by_notebook.setdefault(notebook, [])
            if name not in by_notebook[notebook]:
                by_notebook[notebook].append(name)
        said = "; ".join(f"{', '.join(n)} (notebook {nb})" for nb, n in by_notebook.items())
        first = missing[0][0]
        return CheckResult(
            part.id,
            False,
            f"not written yet: {said}",
            {"unwritten": len(missing)},
            _hint(part, f"write {first} in its build-it cell and run the check cell"),
        )
    verdict = str(event.get("verdict", ""))
    if event.get("passed"):
        return CheckResult(part.id, True, verdict)
    saw = str(event.get("saw", ""))
    return CheckResult(
        part.id,
        False,
        verdict,
        {"saw": saw[:MAX_SAW] + ("..." if len(saw) > MAX_SAW else "")},
        _hint(part, f"run the check cell, read what it saw, and fix {', '.join(part.judges)}"),
    )


def _no_verdict(part: Part, errors: list[str], why: str) -> CheckResult:
    verdict = f"the check did not run: {why}"
    evidence: dict[str, str] = {"error": errors[-1][:MAX_SAW]} if errors else {}
    hint = _hint(part, "run every cell top to bottom, each to its end")
    return CheckResult(part.id, False, verdict, evidence, hint)


def _well_formed(event: dict[str, Any]) -> bool:
    """Whether a verdict line has the shape ``NotebookChecks`` writes (the file is in the
    learner's sandbox: anything else in it is not read)."""
    missing = event.get("missing")
    return (
        isinstance(event.get("name"), str)
        and isinstance(event.get("passed"), bool)
        and isinstance(event.get("verdict"), str)
        and isinstance(event.get("saw"), str)
        and isinstance(missing, list)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("part"), str)
            and isinstance(m.get("notebook"), str)
            for m in missing
        )
    )


class _Progress:
    """What the runner reported so far, read from its events file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.verdicts: dict[str, dict[str, dict[str, Any]]] = {}
        self.errors: dict[str, list[str]] = {}
        self.started: dict[str, float] = {}  # by this machine's clock, when first seen
        self.done: set[str] = set()
        self.current: str | None = None
        self._read = 0

    def update(self) -> None:
        try:
            with self.path.open("rb") as events:
                events.seek(self._read)
                chunk = events.read()
        except FileNotFoundError:
            return
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._read += len(whole)
        for line in whole.decode("utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line that is not the runner's: not read
            if not isinstance(event, dict):
                continue
            kind = event.get("event")
            if kind == "start" and isinstance(event.get("notebook"), str):
                self.current = event["notebook"]
                self.started.setdefault(event["notebook"], time.monotonic())
            elif kind == "done" and event.get("notebook") == self.current:
                self.done.add(event["notebook"])
                self.current = None
            elif kind == "cell_error" and self.current is not None:
                self.errors.setdefault(self.current, []).append(str(event.get("error", "")))
            elif kind == "verdict" and self.current is not None and _well_formed(event):
                by_name = self.verdicts.setdefault(self.current, {})
                by_name.setdefault(event["name"], event)


@dataclass
class _Round:
    """One run of the runner process: each child's progress, and the notebook it was stopped in
    (if any)."""

    progress: list[_Progress]
    stopped: str | None = None
    why: str = ""
    killed: bool = False  # stopped by us: the other children's notebooks in progress run again

    @property
    def started(self) -> set[str]:
        return {name for p in self.progress for name in p.started}

    @property
    def done(self) -> set[str]:
        return {name for p in self.progress for name in p.done}

    def of(self, notebook: str) -> _Progress:
        return next(p for p in self.progress if notebook in p.started)


def _start_runner(
    plan: Path,
    events: Path,
    work: Path,
    cwd: Path,
    env: dict[str, str],
    isolation: Isolation,
    confinement: Confinement,
    zygote: str | None,
) -> subprocess.Popen[bytes] | Spawned:
    """The runner for ``plan``: forked by the class's ``zygote`` (its imports made already)
    where there is one and the sandbox is bubblewrap's, else a new process through ``bwrap``."""
    if zygote is not None and isolation.kind == "bubblewrap" and os.geteuid() == 0:
        cgroup = confinement.cgroup
        sandbox = Sandbox(
            readonly=tuple(readonly_paths([work])),
            writable=(str(work),),
            uid=NOBODY,
            cgroup_procs=tuple(str(d / "cgroup.procs") for d in cgroup.dirs.values())
            if cgroup is not None
            else (),
            niceness=NICENESS,
            file_bytes=NOTEBOOK_LIMITS.file_bytes,
            cpu_s=NOTEBOOK_LIMITS.cpu_s,
            address_space_bytes=0 if cgroup is not None else NOTEBOOK_LIMITS.address_space_bytes,
            env=env,
            cwd=str(cwd),
        )
        with contextlib.suppress(OSError):  # the zygote gone: a runner of its own, as before
            return ZygoteClient(zygote).spawn([str(plan), str(events)], sandbox)
    command = [sys.executable, "-m", "labkit.grading.notebook_runner", str(plan), str(events)]
    wrapped = confinement.wrap(command, writable=[work])
    if nice := shutil.which("nice"):
        wrapped = [nice, "-n", str(NICENESS), *wrapped]
    return subprocess.Popen(
        wrapped,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _run_once(
    runs: Sequence[NotebookRun],
    work: Path,
    isolation: Isolation,
    budget_s: float,
    start_s: float,
    zygote: str | None = None,
) -> _Round:
    """One runner process for ``runs`` (``RUNNERS`` of them side by side, from one queue),
    given ``start_s`` for its imports and ``budget_s`` for each notebook; forked by
    ``zygote`` (a socket's path, ``labkit.grading.zygote``) when there is one."""
    plan = work / "runs.json"
    runners = min(RUNNERS if zygote is None else CLASS_RUNNERS, len(runs))
    plan.write_text(
        json.dumps({"runners": runners, "runs": [run.to_json() for run in runs]}),
        encoding="utf-8",
    )
    events = work / "events"
    for old in work.glob("events-*"):
        old.unlink()
    cwd = work / "learner" / "notebooks"
    for run in runs:  # a notebook's private proxy.py as handed out, afresh for each round
        for name, text in run.files:
            (cwd / name).write_text(text, encoding="utf-8")
    isolation.prepare([path for path in work.rglob("*")] + [work])
    confinement = Confinement.create(isolation, NOTEBOOK_LIMITS)
    env = clean_env(cwd, {"MPLBACKEND": "Agg", "IPYTHONDIR": str(work / ".ipython")})
    process = _start_runner(plan, events, work, cwd, env, isolation, confinement, zygote)
    result = _Round([_Progress(Path(f"{events}-{n}.jsonl")) for n in range(runners)])
    born = time.monotonic()
    try:
        while process.poll() is None and not result.killed:
            time.sleep(POLL_S)
            now = time.monotonic()
            for progress in result.progress:
                progress.update()
            if not result.started and now - born > start_s:
                result.killed = True  # no notebook is to blame: each fails saying so
                result.why = (
                    f"the notebook runner did not start within {start_s:g} s (the grading "
                    "machine was overloaded): grade this submission again"
                )
            for progress in result.progress:
                current = progress.current
                if current is not None and now - progress.started[current] > budget_s:
                    result.stopped = current
                    result.why = (
                        f"its graded cells took longer than {budget_s:g} s and were stopped"
                    )
                if result.stopped is not None:
                    result.killed = True
                    break
    finally:
        if process.poll() is None:
            if isinstance(process, Spawned):
                process.kill()
            else:
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if confinement.release() and result.stopped is None:
            limit = NOTEBOOK_LIMITS.memory_bytes // MIB
            result.why = f"the notebooks held more than {limit} MiB of memory and were stopped"
        isolation.reap()
    for progress in result.progress:
        progress.update()
    if result.stopped is None and not result.killed:  # it ended with a notebook unfinished
        unfinished = [p.current for p in result.progress if p.current is not None]
        if unfinished:
            result.stopped = unfinished[0]
            result.why = result.why or (
                f"the notebook's run ended early (exit status {process.returncode})"
            )
    return result


def grade_notebook_parts(
    notebooks: Path | None,
    course: Sequence[CourseNotebook],
    *,
    proxy: Path | None = None,
    budget_s: float | None = None,
    budget: Budget | None = None,
    zygote: str | None = None,
) -> list[CheckResult]:
    """One result per part of ``course``, for the learner notebooks in the folder
    ``notebooks`` (``None``: they handed in ``proxy.py`` alone), with their ``proxy.py``.
    ``budget_s`` is each notebook's time at one CPU (default NOTEBOOK_BUDGET_S), stretched for
    ``budget``, the grading's machine. A top-level entry point: given none, it reads this
    machine once here (``Budget.here()``)."""
    if notebooks is None:
        return not_graded(course, f"not handed in: only proxy.py was; {UPLOAD_HINT}", UPLOAD_HINT)
    results: dict[str, CheckResult] = {}
    runs: list[NotebookRun] = []
    for nb in course:
        path = notebooks / f"{nb.stem}.ipynb"
        try:
            if not path.is_file():
                raise FileNotFoundError(path)
            runs.append(learner_run(nb, notebook_cells(path.read_bytes(), path.name)))
        except FileNotFoundError:
            for part in nb.parts:
                results[part.id] = CheckResult(
                    part.id, False, f"notebook {nb.stem} was not handed in", {}, UPLOAD_HINT
                )
        except ValueError as exc:  # not a notebook
            for part in nb.parts:
                results[part.id] = CheckResult(
                    part.id,
                    False,
                    f"notebook {nb.stem} could not be read",
                    {"error": str(exc)},
                    f"open {path.name} in JupyterLab, save it, then hand in notebooks/ again.",
                )
    if runs:
        machine = Budget.here() if budget is None else budget  # the top level, given none
        results.update(_run_all(runs, course, proxy, budget_s, machine, zygote))
    return [results[part.id] for nb in course for part in nb.parts]


def _run_all(
    runs: list[NotebookRun],
    course: Sequence[CourseNotebook],
    proxy: Path | None,
    budget_s: float | None,
    machine: Budget,
    zygote: str | None = None,
) -> dict[str, CheckResult]:
    """``runs`` in one sandboxed runner, ``RUNNERS`` at a time; run again, for the notebooks
    still to run, after one that had to be stopped."""
    parts = {nb.stem: nb.parts for nb in course}
    budget = machine.stretch(budget_s or NOTEBOOK_BUDGET_S)
    start_s = machine.stretch(START_BUDGET_S)
    isolation = choose(NOTEBOOK_LIMITS)
    results: dict[str, CheckResult] = {}
    work = Path(tempfile.mkdtemp(prefix="labkit-notebooks-"))
    try:
        (work / "learner" / "notebooks").mkdir(parents=True)
        if proxy is not None and proxy.is_file():
            shutil.copyfile(proxy, work / "learner" / "proxy.py")
        # The queue from the last notebook to the first: the later ones start more servers
        # (12 and 13 serve proxy.py, 13 nginx too) and take longest, and a long notebook taken
        # last would leave the other runners idle while it ends.
        remaining = runs[::-1]
        while remaining:
            outcome = _run_once(remaining, work, isolation, budget, start_s, zygote)
            finished: set[str] = set()
            for run in remaining:
                name = run.notebook
                if name in outcome.done or name == outcome.stopped:
                    progress = outcome.of(name) if name in outcome.started else None
                    verdicts = progress.verdicts.get(name, {}) if progress else {}
                    errors = progress.errors.get(name, []) if progress else []
                    reason = outcome.why if name == outcome.stopped else "a cell raised"
                    for part in parts[name]:
                        if part.check in verdicts:
                            results[part.id] = _from_verdict(part, verdicts[part.check])
                        else:
                            results[part.id] = _no_verdict(part, errors, reason)
                    finished.add(name)
            if not finished:  # nothing ran to an end: do not try again forever
                for run in remaining:
                    for part in parts[run.notebook]:
                        why = outcome.why or "the runner ended before it"
                        results[part.id] = _no_verdict(part, [], why)
                break
            remaining = [run for run in remaining if run.notebook not in finished]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def notebook_rows(
    course: Path,
    notebooks: Path | None,
    proxy: Path,
    budget: Budget,
    zygote: str | None = None,
) -> list[CheckResult]:
    """A row for each in-notebook part of the instructor's notebooks in ``course``, graded
    from the learner's ``notebooks`` folder and their ``proxy``, within ``budget``'s limits
    (the runner forked by the class's ``zygote`` when there is one)."""
    return grade_notebook_parts(
        notebooks, course_notebooks(course), proxy=proxy, budget=budget, zygote=zygote
    )
