"""GitHub Classroom, simulated: a learner bundle's ``.github/workflows/classroom.yml`` parsed
and its steps run as a runner runs them, in the bundle's folder. A ``run:`` step runs in
``bash -eo pipefail`` (GitHub's default shell); a command-grader step runs its ``command``
with ``/bin/sh -c`` (the action's ``execSync``) and scores ``max-score`` on exit 0; a step
runs only while every step before it succeeded, unless its ``if:`` is ``always()``. Only the
checkout, set-up-Python and reporter actions are not run: the bundle is the checkout, a
Python 3.11 is first on PATH, and the reporter's sum is computed here.

The learner owns that repository, grader included: a bundle whose checks were edited to pass
everything must not give a stubbed proxy a single passing step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from grading_support import REFERENCE

from labkit.checks import CHECK_IDS
from labkit.errors import GradingError, run_command
from labkit.grading.classroom import RUNNER_PATTERN, WORKFLOW_FILE, grader_files, step_points
from labkit.grading.classroom import main as classroom_main
from labkit.grading.notebook_parts import COURSE_FILE, course_notebooks, read_course
from labkit.grading.rubric import Rubric, is_part_id
from labkit.student import make_bundle

ROOT = Path(__file__).resolve().parents[2]
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
NOT_RUN = ("actions/checkout@", "actions/setup-python@", REPORTER)
# A rubric whose weights do not share 100 evenly: the steps' whole points must still add up.
RUBRIC = "max_score = 100\n[weights]\ntrickle = 2\ncancel = 2\nusage = 1.5\ntool_calls = 0\n"
PART_IDS = [p.id for nb in course_notebooks(ROOT / "notebooks") for p in nb.parts]


@dataclass
class Run:
    """What the simulated runner saw: each step's outcome and the graded steps' points."""

    outcomes: dict[str, str] = field(default_factory=dict)  # step name -> success/failure/skipped
    points: dict[str, tuple[float, float]] = field(default_factory=dict)  # test -> (got, max)
    logs: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> list[str]:
        return [name for name, (got, _) in self.points.items() if got > 0]


def _steps(bundle: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load((bundle / WORKFLOW_FILE).read_text())
    [job] = data["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _python_dir() -> Path:
    """The folder of this interpreter's base Python 3.11 (outside /tmp, which the sandbox
    hides), first on PATH as setup-python puts its own."""
    folder = Path(sys.base_prefix) / "bin"
    assert (folder / "python").exists() or (folder / "python3").exists(), folder
    return folder


def _runner_python() -> None:
    """The workflow's install step calls ``python``, as setup-python provides it; a
    distribution's Python (Debian's /usr/bin) has only ``python3``. Skip, saying so."""
    if not (_python_dir() / "python").exists():
        pytest.skip(
            f"{_python_dir()} has no `python`, which the workflow calls as GitHub's "
            "setup-python provides it: run the tests on a standalone Python (pyenv's or uv's)"
        )


def run_workflow(
    bundle: Path, tmp: Path, *, only: set[str] | None = None, setup: bool = True
) -> Run:
    """Run the bundle's workflow; ``only``: the graded steps (test names) to run, the others
    being left out as if they were not in the file; ``setup=False``: the graded steps alone,
    with the grader a run before installed in ``tmp``."""
    temp = tmp / "runner-temp"
    temp.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith(("PYTEST", "LABKIT"))
    }
    env["PATH"] = f"{_python_dir()}{os.pathsep}{env.get('PATH', '')}"
    env["RUNNER_TEMP"] = str(temp)
    run = Run()
    failed = False
    for step in _steps(bundle):
        name = step.get("name") or step.get("uses", "")
        uses = step.get("uses", "")
        condition = step.get("if")
        assert condition in (None, "always()"), f"{name}: cannot simulate if: {condition}"
        if uses.startswith(NOT_RUN) or (not setup and uses != COMMAND_GRADER):
            continue
        if uses == COMMAND_GRADER and only is not None and step["with"]["test-name"] not in only:
            continue
        if failed and condition != "always()":
            run.outcomes[name] = "skipped"
            continue
        if uses == COMMAND_GRADER:
            spec = step["with"]
            timeout = float(spec["timeout"]) * 60
            done = subprocess.run(
                ["/bin/sh", "-c", spec["command"]],
                cwd=bundle,
                env=env,
                capture_output=True,
                timeout=timeout,
            )
            top = float(int(spec["max-score"]))  # the action's parseInt
            run.points[spec["test-name"]] = (top if done.returncode == 0 else 0.0, top)
            run.outcomes[name] = "success"  # the action records a failed test, not a failed step
        else:
            assert uses == "", f"{name}: an action this test does not know: {uses}"
            if "python -m venv" in step["run"]:
                _runner_python()
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                cwd=bundle,
                env=env,
                capture_output=True,
                timeout=900,
            )
            run.outcomes[name] = "success" if done.returncode == 0 else "failure"
            failed = failed or done.returncode != 0
        run.logs[name] = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    return run


@pytest.fixture(scope="module")
def rubric_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rubric") / "rubric.toml"
    path.write_text(RUBRIC)
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, rubric_file: Path) -> Path:
    """A learner bundle as `labkit student --rubric` writes it (never changed by a test)."""
    out = tmp_path_factory.mktemp("bundle") / "student"
    make_bundle(ROOT / "notebooks", REFERENCE, out, rubric=Rubric.load(rubric_file))
    return out


def _copy(pristine: Path, tmp_path: Path) -> Path:
    bundle = tmp_path / "repo"
    shutil.copytree(pristine, bundle, symlinks=True)
    return bundle


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    path.write_text(text.replace(old, new, 1))


def _pass_everything_in_the_checks(bundle: Path) -> list[str]:
    """What a learner would write to pass every check: each check and the runner report a
    pass, and the grader no longer notices the unwritten parts."""
    runner = bundle / "labkit" / "checks" / "runner.py"
    _edit(
        runner,
        "    result = await _attempt(check, ctx)\n",
        "    return CheckResult(check.id, True, 'passed')\n"
        "    result = await _attempt(check, ctx)\n",
    )
    _edit(
        bundle / "labkit" / "checks" / "trickle.py",
        '"""',
        '"""Edited by the learner.\n',
    )
    _edit(
        bundle / "labkit" / "grading" / "grader.py",
        "    missing = unwritten(source)\n",
        "    missing = []\n",
    )
    return ["labkit/checks/runner.py", "labkit/checks/trickle.py", "labkit/grading/grader.py"]


def _entry_point_returns_zero(bundle: Path) -> list[str]:
    """The shortest way to full marks under a grader taken from the repository."""
    cli = bundle / "labkit" / "cli.py"
    _edit(
        cli,
        "def main(argv: Sequence[str] | None = None) -> int:\n",
        ("def main(argv: Sequence[str] | None = None) -> int:\n    return 0\n"),
    )
    return ["labkit/cli.py"]


def _rubric_and_lock_changed(bundle: Path) -> list[str]:
    (bundle / ".github" / "classroom" / "rubric.toml").write_text("max_score = 1000\n")
    (bundle / "labkit" / "bundle_files" / "grader-requirements.txt").unlink()
    return [".github/classroom/rubric.toml", "labkit/bundle_files/grader-requirements.txt"]


@pytest.mark.parametrize(
    "tamper",
    [_pass_everything_in_the_checks, _entry_point_returns_zero, _rubric_and_lock_changed],
)
@pytest.mark.sockets
def test_a_bundle_whose_grader_was_edited_gives_a_stubbed_proxy_no_passing_step(
    pristine: Path, tmp_path: Path, tamper: Any
) -> None:
    bundle = _copy(pristine, tmp_path)
    assert "NotImplementedError" in (bundle / "proxy.py").read_text()  # the stubbed proxy
    changed = tamper(bundle)
    (bundle / "labkit" / "checks" / "extra_module.py").write_text("PASS = True\n")  # never copied

    run = run_workflow(bundle, tmp_path)

    assert run.passed == [], run.points
    assert sorted(run.points) == sorted(
        step_points(Rubric.load(pristine / ".github/classroom/rubric.toml"), PART_IDS)
    )
    check = "Check that the grader files are the instructor's"
    assert run.outcomes[check] == "failure"
    assert run.outcomes["Install the checked grader from its lock"] == "skipped"
    [line] = [ln for ln in run.logs[check].splitlines() if ln.startswith("::error")]
    assert line.startswith("::error title=Not graded::score 0: the grader files differ")
    named = re.search(r"instructor's: (.*)\. Restore", line)
    assert named is not None and named.group(1).split() == changed


def test_the_workflow_s_points_add_up_to_the_rubric_s_max_score(
    pristine: Path, rubric_file: Path
) -> None:
    steps = [s for s in _steps(pristine) if s.get("uses") == COMMAND_GRADER]
    points = {s["with"]["test-name"]: s["with"]["max-score"] for s in steps}
    assert all(isinstance(p, int) for p in points.values()), points  # parseInt: whole points
    assert sum(points.values()) == Rubric.load(rubric_file).max_score == 100
    assert "tool_calls" not in points
    assert set(points) == set(CHECK_IDS) - {"tool_calls"} | set(PART_IDS)
    assert [name for name in points if is_part_id(name)] == PART_IDS  # after the checks'
    assert sum(points[i] for i in PART_IDS) == 25  # the rubric's default notebook_share
    exact = Rubric.load(rubric_file).points(list(points))  # e.g. trickle 13.79 of 100
    assert all(abs(points[i] - exact[i]) < 1 for i in points), (points, exact)
    assert points["cancel"] > points["usage"] > points["keepalive"]


def test_the_reporter_accepts_the_runners_and_finds_each_step(pristine: Path) -> None:
    [reporter] = [s for s in _steps(pristine) if s.get("uses") == REPORTER]
    runners = reporter["with"]["runners"]
    assert RUNNER_PATTERN.match(runners), runners
    ids = [s["id"] for s in _steps(pristine) if s.get("uses") == COMMAND_GRADER]
    assert runners.split(",") == ids
    for step_id in ids:
        assert reporter["env"][f"{step_id.upper()}_RESULTS"] == (
            f"${{{{steps.{step_id}.outputs.result}}}}"
        )


def test_the_digests_cover_every_grader_file_and_the_rubric(pristine: Path) -> None:
    workflow = (pristine / WORKFLOW_FILE).read_text()
    listed = re.findall(r"^\s+[0-9a-f]{64}  (\S+)$", workflow, flags=re.MULTILINE)
    assert listed == grader_files(pristine)
    for name in (
        "labkit/checks/runner.py",
        "labkit/cli.py",
        "mock_upstream/app.py",
        "pyproject.toml",
        "labkit/bundle_files/grader-requirements.txt",
        ".github/classroom/rubric.toml",
    ):
        assert name in listed
    assert "proxy.py" not in listed and not any(n.startswith("notebooks/") for n in listed)


def test_a_rubric_classroom_cannot_count_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    with pytest.raises(Exception, match="Set max_score to a whole number"):
        make_bundle(ROOT / "notebooks", REFERENCE, tmp_path / "out", rubric=Rubric(max_score=99.5))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.timeout(1200)  # installs the grader's lock from PyPI into a new venv
@pytest.mark.sockets
def test_the_untouched_bundle_grades_through_its_workflow(pristine: Path, tmp_path: Path) -> None:
    """The same workflow, run on the bundle as made: the reference passes its graded steps and
    the stubbed proxy passes none (so the test above fails for the right reason)."""
    bundle = _copy(pristine, tmp_path)
    stubbed = (bundle / "proxy.py").read_text()
    only = {"trickle", "usage"}
    shutil.copy(REFERENCE, bundle / "proxy.py")
    run = run_workflow(bundle, tmp_path, only=only)
    assert run.outcomes["Check that the grader files are the instructor's"] == "success"
    assert run.outcomes["Install the checked grader from its lock"] == "success", run.logs
    assert sorted(run.passed) == sorted(only), run.logs
    (bundle / "proxy.py").write_text(stubbed)
    again = run_workflow(bundle, tmp_path, only=only, setup=False)
    assert again.passed == [] and sorted(again.points) == sorted(only), again.logs


def test_the_bundle_carries_the_notebook_parts_course_under_its_digests(pristine: Path) -> None:
    planned = f"labkit/bundle_files/{COURSE_FILE}"
    listed = re.findall(r"^\s+[0-9a-f]{64}  (\S+)$", (pristine / WORKFLOW_FILE).read_text(), re.M)
    assert planned in listed  # a learner who edits a judge changes a digest
    course = read_course(pristine / planned)
    assert [p.id for nb in course for p in nb.parts] == PART_IDS
    assert "BEGIN SOLUTION" not in (pristine / planned).read_text()


def _part_step(bundle: Path, part: str, results: Path) -> subprocess.CompletedProcess[str]:
    """The part's graded step as the workflow runs it, with the bundle's own labkit (so its
    packaged course) on this environment's interpreter."""
    command = [sys.executable, "-m", "labkit.grading.classroom", part, "--results", str(results)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "LABKIT"))}
    env["PYTHONPATH"] = str(bundle)
    return subprocess.run(command, cwd=bundle, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.sockets
def test_a_part_step_grades_the_learners_notebooks_once_and_answers_for_its_part(
    pristine: Path, tmp_path: Path
) -> None:
    bundle = _copy(pristine, tmp_path)
    shutil.copy(REFERENCE, bundle / "proxy.py")
    results = tmp_path / "grader" / "notebook-parts.json"
    unwritten = _part_step(bundle, "nb03.should_compress", results)
    assert unwritten.returncode == 1, unwritten.stderr
    assert unwritten.stdout.startswith(
        "FAIL nb03.should_compress: not written yet: should_compress"
    )
    assert sorted(json.loads(results.read_text())) == sorted(PART_IDS)  # every part, once
    shutil.rmtree(bundle / "notebooks")
    shutil.copytree(ROOT / "notebooks", bundle / "notebooks")  # every part written
    results.unlink()
    written = _part_step(bundle, "nb03.should_compress", results)
    assert written.returncode == 0 and written.stdout.startswith("PASS nb03.should_compress")
    assert all(row["passed"] for row in json.loads(results.read_text()).values())
    shutil.rmtree(bundle / "notebooks")  # proxy.py alone: the results already written stand
    assert _part_step(bundle, "nb14.predict", results).returncode == 0
    results.unlink()
    alone = _part_step(bundle, "nb14.predict", results)
    assert alone.returncode == 1 and "make submit" in alone.stdout


def test_a_part_step_that_cannot_grade_says_why_in_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug: ``python -m labkit.grading.classroom`` had no error handler: a verdicts file that is
    not JSON, or a grader installed without its course (``GradingError``), ended the step with
    a traceback in the learner's Actions log. Fix: ``main`` runs through ``run_command``, the
    handler ``labkit``'s own ``main`` uses: ``error: <message>`` and the error's exit code."""
    results = tmp_path / "notebook-parts.json"
    results.write_text("{ half a file", encoding="utf-8")
    assert classroom_main(["nb08.adapter", "--results", str(results)]) == GradingError.exit_code
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        f"error: Expected the parts' verdicts in {results} as JSON, by part id (the first "
        "part's step writes them); that file is not (Expecting property name enclosed in "
        "double quotes: line 1 column 3 (char 2)). Delete it and run the steps again: the "
        "first step grades the parts and writes it anew.\n"
    )


def test_every_labkit_entry_point_shares_one_error_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    def unusable() -> int:
        raise GradingError("the grader has no course; package it with its notebooks")

    assert run_command(interrupted) == 130  # 128 + SIGINT, as a shell says
    assert run_command(unusable) == 2
    assert run_command(lambda: 1) == 1
    assert capsys.readouterr().err == (
        "interrupted\nerror: the grader has no course; package it with its notebooks\n"
    )
