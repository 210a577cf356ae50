"""The grader's own environment, checked once before a grading session
(``labkit.grading.environment``): the user that runs learner code must start the grader's
Python, in the sandbox grading uses, and import what a proxy needs. When it cannot, nothing is
graded and no score is written: not by ``labkit grade``, ``grade-class`` or the Gradescope
autograder, and ``labkit doctor`` says the same.

The judge is tried on runs recorded on this machine and on issue 46's; the observation over a
real interpreter that the grading user cannot start, as root (skipped, saying why, elsewhere).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grading_support import REFERENCE

from labkit import doctor
from labkit.cli import main
from labkit.errors import GraderEnvironmentError
from labkit.grading import environment, gradescope
from labkit.grading.environment import (
    PROXY_IMPORTS,
    EnvironmentCheck,
    PythonRun,
    check_environment,
    judge,
)
from labkit.grading.isolation import Limits, NoSandbox

GRADER = "3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]"
LIMIT_S = 30.0


def _report(version: str, failed: dict[str, str] | None = None) -> str:
    return json.dumps({"version": version, "failed": failed or {}}) + "\n"


# Recorded here, as root: the venv's Python (under /root, 0700) run as another uid, through
# the grader's own wrappers (prlimit refuses to start it) ...
CANNOT_START = PythonRun(
    126, "", "prlimit: failed to execute /work/main/.venv/bin/python: Permission denied\n", 0.01
)
# ... and straight through setpriv, which starts it with root's rights: it then loaded the
# system's libpython and standard library, and redis needs a module 3.11.2 does not have.
ANOTHER_PYTHON = PythonRun(
    0,
    _report(
        "3.11.2 (main, Apr 28 2025, 14:11:48) [GCC 12.2.0]",
        {"redis": "ModuleNotFoundError: No module named 'async_timeout'"},
    ),
    "",
    0.9,
)
# Issue 46's, on Gradescope: the same version, another libpython, an extension that needs a
# symbol it does not have.
UNDEFINED_SYMBOL = PythonRun(
    0,
    _report(
        GRADER,
        {
            "fastapi": "ImportError: /autograder/venv/lib/python3.11/site-packages/"
            "pydantic_core/_pydantic_core.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
            "_PyModule_Add"
        },
    ),
    "",
    0.8,
)


def test_a_python_that_started_and_imported_everything_is_fine() -> None:
    assert judge(PythonRun(0, _report(GRADER), "", 0.9), version=GRADER, limit_s=LIMIT_S) == ""


@pytest.mark.parametrize(
    ("run", "problem"),
    [
        (CANNOT_START, "Python did not start (exit status 126)"),
        (
            ANOTHER_PYTHON,
            "it ran another Python (3.11.2 (main, Apr 28 2025, 14:11:48) [GCC 12.2.0]) than the "
            "grader's (3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]): that user cannot "
            "read the grader's own libpython or standard library, and another was found; it "
            "could not import redis (redis: ModuleNotFoundError: No module named "
            "'async_timeout')",
        ),
        (
            UNDEFINED_SYMBOL,
            "it could not import fastapi (fastapi: ImportError: /autograder/venv/lib/python3.11/"
            "site-packages/pydantic_core/_pydantic_core.cpython-311-x86_64-linux-gnu.so: "
            "undefined symbol: _PyModule_Add)",
        ),
        (PythonRun(None, "", "", LIMIT_S), "it did not finish within 30 s"),
        (PythonRun(1, _report(GRADER), "Traceback ...", 0.9), "it exited with status 1"),
        (PythonRun(1, "Fatal Python error: init_fs_encoding", "", 0.1), "Python did not start "),
    ],
    ids=["cannot_start", "another_python", "undefined_symbol", "timeout", "exit", "no_report"],
)
def test_each_way_the_grading_users_python_fails_is_named(run: PythonRun, problem: str) -> None:
    assert judge(run, version=GRADER, limit_s=LIMIT_S).startswith(problem)


def test_the_check_says_who_ran_what_in_one_line() -> None:
    good = EnvironmentCheck(
        "the grading user (uid 61234, no sandbox of its own)", "/v/python", "", "", 0.94
    )
    bad = EnvironmentCheck(
        "the grading user (uid 65534, inside bubblewrap)",
        "/v/python",
        "it did not finish within 30 s",
        "",
        30,
    )
    assert good.describe() == (
        "the grading user (uid 61234, no sandbox of its own) starts /v/python and imports what "
        "a proxy needs (0.9 s)"
    )
    assert bad.describe() == (
        "the grading user (uid 65534, inside bubblewrap) cannot start /v/python with what a "
        "proxy needs: it did not finish within 30 s"
    )


def test_a_proxys_imports_are_the_ones_checked() -> None:
    assert PROXY_IMPORTS == (
        "labkit.servers._child", "fastapi", "starlette", "httpx", "uvicorn", "redis"
    )  # fmt: skip


@pytest.mark.sockets
def test_the_grading_user_here_starts_this_python_in_the_sandbox_grading_chooses() -> None:
    started = time.monotonic()
    checked = check_environment()
    assert checked.ok, checked.describe() + "\n" + checked.details
    print(f"the check took {checked.elapsed_s:.2f} s ({time.monotonic() - started:.2f} s in all)")


@pytest.fixture
def unstartable_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The grader's Python as a link in a folder only root may enter (as ``mktemp -d`` makes),
    and the sandbox of a machine without bubblewrap: learner code as a uid of its own. Root can
    start that Python; the grading user cannot."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv: only root runs learner code as another user")
    private = Path(tempfile.mkdtemp(prefix="labkit-private-"))
    assert private.stat().st_mode & 0o777 == 0o700
    python = private / "python"
    python.symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setattr(
        environment, "choose", lambda: NoSandbox(Limits(), "bwrap is refused here", drop=True)
    )
    yield python
    shutil.rmtree(private)


@pytest.mark.sockets
def test_a_python_the_grading_user_cannot_start_is_the_graders_fault(
    unstartable_python: Path,
) -> None:
    checked = check_environment()
    assert not checked.ok
    assert checked.problem.startswith(("Python did not start", "it ran another Python"))
    error = checked.error()
    assert isinstance(error, GraderEnvironmentError)
    assert str(error).startswith(
        "The grader's environment is broken, not the submission: the grading user (uid "
    )
    assert f"could not start {unstartable_python} and import what a proxy needs" in str(error)
    assert "No submission was graded and no score was given." in str(error)


@pytest.mark.sockets
def test_labkit_grade_grades_nothing_and_writes_no_score(
    unstartable_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = tmp_path / "proxy.py"
    shutil.copy(REFERENCE, proxy)
    target = tmp_path / "results.json"

    assert main(["grade", str(proxy), "--gradescope", str(target)]) == 3

    out, err = capsys.readouterr()
    assert out == "", "a report was shown"
    assert err.startswith("error: The grader's environment is broken, not the submission: ")
    results = json.loads(target.read_text())
    assert "score" not in results and "tests" not in results, results
    assert results["output"].startswith(gradescope.ENVIRONMENT_BROKEN)


@pytest.mark.sockets
def test_grade_class_grades_no_one(
    unstartable_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "submissions"
    folder.mkdir()
    for learner in ("ada", "grace"):
        shutil.copy(REFERENCE, folder / f"{learner}.py")
    out = tmp_path / "grades"

    assert main(["grade-class", str(folder), "--out", str(out)]) == 3

    assert "error: The grader's environment is broken" in capsys.readouterr().err
    assert not (out / "grades.csv").exists()


@pytest.mark.sockets
def test_gradescope_writes_no_score_and_says_the_grader_is_at_fault(
    unstartable_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What run_autograder runs, in this process (the sandbox of a machine without bubblewrap
    is chosen here, not in a child)."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    shutil.copy(REFERENCE, root / "submission" / "proxy.py")

    assert gradescope.main(["--root", str(root)]) == 3

    results = json.loads((root / "results" / "results.json").read_text())
    assert "score" not in results and "tests" not in results, results
    assert results["output"].startswith(
        "Your file was not graded, and no score was given: the grader's own environment is "
        "broken (it could not start Python as the user that runs your proxy). That is not a "
        "verdict on your proxy and nothing for you to fix."
    )
    assert "For your instructor: The grader's environment is broken" in results["output"]
    err = capsys.readouterr().err
    assert err.startswith("error: not graded, no score written to ")


@pytest.mark.sockets
def test_doctor_finds_it_before_any_class_is_graded(unstartable_python: Path) -> None:
    line = doctor._check_grading_user()
    assert line.status == "fail"
    assert line.found.startswith("the grading user (uid ")
    assert f"cannot start {unstartable_python} with what a proxy needs: " in line.found
    assert line.fix is not None and line.fix.startswith("nothing can be graded here")
