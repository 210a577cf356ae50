"""Before a grading session: can the user that runs learner code start the grader's Python?

A submission's proxy runs as another user than the grader (as root: an unprivileged uid,
inside bubblewrap or not; ``labkit.grading.isolation``). When that user cannot read the
interpreter, the libpython it loads or the lab's packages, every proxy dies before it serves,
and the report would tell the learner "the proxy in proxy.py exited before it was serving ...
Fix it and grade again": the grader's fault, charged to the learner. Issue 46 met it on the
Gradescope path: a CPython whose libpython lay where the grading user could not read it, so its
proxies loaded another libpython and died with ``ImportError: ... undefined symbol``.

So a grading session starts here, once: ``check_environment`` runs the interpreter the proxies
get (``sys.executable``) as the grading user, inside the isolation they get (the same wrappers,
cgroup and stripped environment as ``sandbox.start_proxy``), and imports what a proxy's process
imports (``PROXY_IMPORTS``). ``require_environment`` raises
:class:`~labkit.errors.GraderEnvironmentError` when it could not: ``labkit grade``,
``grade-class`` and the Gradescope autograder then grade nothing and write no score, and
``labkit doctor`` shows the same line before a class is graded. It takes about a second (one
Python start and its imports; docs/instructors.md).

Observe, then judge: ``observe`` runs the child and keeps what it did (``PythonRun``); ``judge``
says what is wrong with that, if anything, and reads nothing but the run. The child reports
its version and each failed import as one line of JSON, so no verdict parses a traceback.

``python -m labkit.grading.environment`` prints the check's line (exit 0, or 2 when broken):
the Gradescope autograder's ``setup.sh`` runs it while the image is built.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from labkit.checks.machine import Budget
from labkit.errors import GraderEnvironmentError, run_command
from labkit.grading.isolation import Confinement, Isolation, choose
from labkit.grading.sandbox import clean_env
from labkit.servers import CHILD_MODULE

__all__ = [
    "CHECK_S",
    "PROXY_IMPORTS",
    "EnvironmentCheck",
    "GraderEnvironmentError",
    "PythonRun",
    "check_environment",
    "judge",
    "main",
    "observe",
    "require_environment",
]

#: What a proxy's process imports: the child that serves it, and what a learner's proxy.py
#: imports from the lab's packages (redis: notebook 15's replay log).
PROXY_IMPORTS: Final = (CHILD_MODULE, "fastapi", "starlette", "httpx", "uvicorn", "redis")
#: How long the child may take, for one CPU (``Budget.stretch``): it takes about a second.
CHECK_S: Final = 30.0
TAIL_LINES: Final = 12

# The child: each import in turn, then one line of JSON with its version and what failed.
_CHILD = """\
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"version": sys.version, "failed": failed}))
"""


@dataclass(frozen=True)
class PythonRun:
    """What the grading user's Python did: its exit status (None: stopped at the time limit),
    what it printed, and how long it took."""

    returncode: int | None
    stdout: str
    stderr: str
    elapsed_s: float


@dataclass(frozen=True)
class EnvironmentCheck:
    """The session's check: who ran which Python, what was wrong ('' if nothing), the last
    lines of the child's stderr, how long it took."""

    user: str
    python: str
    problem: str
    details: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return not self.problem

    def describe(self) -> str:
        """One line: what ran where, and how it went."""
        if self.ok:
            return (
                f"{self.user} starts {self.python} and imports what a proxy needs "
                f"({self.elapsed_s:.1f} s)"
            )
        return f"{self.user} cannot start {self.python} with what a proxy needs: {self.problem}"

    def error(self) -> GraderEnvironmentError:
        return GraderEnvironmentError(
            user=self.user,
            python=self.python,
            imports=PROXY_IMPORTS,
            problem=self.problem,
            details=self.details,
        )


def observe(isolation: Isolation, *, python: str, limit_s: float) -> PythonRun:
    """Run ``python`` as ``isolation`` runs a proxy: in a folder of its own, wrapped in the
    same cgroup and sandbox, with the same stripped environment; stopped after ``limit_s``."""
    home = Path(tempfile.mkdtemp(prefix="labkit-check-"))
    confinement = Confinement.create(isolation)
    started = time.monotonic()
    try:
        isolation.prepare([home])
        command = confinement.wrap([python, "-c", _CHILD, *PROXY_IMPORTS], writable=[home])
        try:
            process = subprocess.Popen(
                command,
                cwd=home,
                env=clean_env(home),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:  # a wrapper (setpriv, bwrap, prlimit) could not be started
            return PythonRun(127, "", f"{command[0]}: {exc}", time.monotonic() - started)
        returncode: int | None
        try:
            out, err = process.communicate(timeout=limit_s)
            returncode = process.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            returncode = None
        return PythonRun(
            returncode,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            time.monotonic() - started,
        )
    finally:
        confinement.release()
        isolation.reap()
        shutil.rmtree(home, ignore_errors=True)


def _report(stdout: str) -> tuple[str, dict[str, str]] | None:
    """The child's version and failed imports, from its last line; None if it printed none."""
    lines = stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    version, failed = data.get("version"), data.get("failed")
    if not isinstance(version, str) or not isinstance(failed, dict):
        return None
    return version, {str(k): str(v) for k, v in failed.items()}


def judge(run: PythonRun, *, version: str, limit_s: float) -> str:
    """What is wrong with ``run`` ('' if nothing): it did not finish, Python did not start,
    it was another Python than the grader's (``version``: this process's ``sys.version``),
    or an import failed."""
    if run.returncode is None:
        return f"it did not finish within {limit_s:g} s"
    report = _report(run.stdout)
    if report is None:
        return f"Python did not start (exit status {run.returncode})"
    ran, failed = report
    problems = []
    if ran != version:
        problems.append(
            f"it ran another Python ({ran.splitlines()[0]}) than the grader's "
            f"({version.splitlines()[0]}): that user cannot read the grader's own libpython or "
            "standard library, and another was found"
        )
    if failed:
        name, error = next(iter(failed.items()))
        problems.append(f"it could not import {', '.join(failed)} ({name}: {error})")
    if not problems and run.returncode != 0:
        problems.append(f"it exited with status {run.returncode}")
    return "; ".join(problems)


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-TAIL_LINES:])


def check_environment(
    isolation: Isolation | None = None, *, python: str | None = None, budget: Budget | None = None
) -> EnvironmentCheck:
    """Start ``python`` (default: this process's, the one proxies are started with) as the
    grading user of ``isolation`` (default: the one grading chooses, ``isolation.choose``) and
    import ``PROXY_IMPORTS``. ``budget``: the machine the time limit is for; a top-level entry
    point, given none it reads this machine (``Budget.here()``). Raises
    ``SandboxUnavailableError`` as ``choose`` does."""
    isolation = isolation or choose()
    python = python or sys.executable
    limit = (Budget.here() if budget is None else budget).stretch(CHECK_S)
    run = observe(isolation, python=python, limit_s=limit)
    problem = judge(run, version=sys.version, limit_s=limit)
    details = _tail(run.stderr) if problem else ""
    return EnvironmentCheck(isolation.grading_user(), python, problem, details, run.elapsed_s)


def require_environment(
    isolation: Isolation | None = None, *, python: str | None = None, budget: Budget | None = None
) -> EnvironmentCheck:
    """``check_environment``, raising ``GraderEnvironmentError`` when it found a problem."""
    checked = check_environment(isolation, python=python, budget=budget)
    if not checked.ok:
        raise checked.error()
    return checked


def main(argv: list[str] | None = None) -> int:
    """Print the check's line; 0 when the grading user can start Python, else the error's
    exit code with the whole error on stderr (``run_command``, as every entry point)."""
    argparse.ArgumentParser(
        prog="python -m labkit.grading.environment",
        description="Can the user that runs learner code start the grader's Python and import "
        "what a proxy needs, in the sandbox grading uses?",
    ).parse_args(argv)

    def body() -> int:
        checked = check_environment()
        print(f"grading user's Python: {checked.describe()}")
        if not checked.ok:
            raise checked.error()
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
