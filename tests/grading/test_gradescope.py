"""Gradescope, simulated: the autograder zip unpacked into a temporary AUTOGRADER_ROOT, a
submission in ``submission/``, ``run_autograder`` run as Gradescope runs it. Whatever was
uploaded, a valid ``results/results.json`` comes out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from grading_support import REFERENCE, write_variant

from labkit.checks import CHECK_IDS
from labkit.cli import main
from labkit.grading.autograder import write_gradescope_zip
from labkit.grading.gradescope import NotGradable, find_submission
from labkit.grading.rubric import Rubric
from labkit.packaging import locked_requirements
from labkit.regions import strip_solutions
from tests.notebooks.bundle_leaks import leaks

ROOT = Path(__file__).resolve().parents[2]
# What Gradescope's results.json may hold at the top level and in each test (its specification)
TOP_FIELDS = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "visibility",
    "stdout_visibility",
    "tests",
    "leaderboard",
}
TEST_FIELDS = {"name", "score", "max_score", "status", "output", "visibility"}


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zip") / "autograder.zip"
    write_gradescope_zip(out, Rubric())
    return out


def _root(tmp_path: Path, autograder_zip: Path, *, venv: Path | None = None) -> Path:
    """An AUTOGRADER_ROOT as Gradescope lays it out after setup.sh: source/ from the zip,
    run_autograder beside it, and a venv (here the project's own, so no install is needed)."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "venv").symlink_to(venv or Path(sys.prefix))
    return root


def _run(root: Path) -> dict[str, Any]:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["bash", str(root / "run_autograder")], env=env, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()
    results: dict[str, Any] = json.loads((root / "results" / "results.json").read_text())
    assert set(results) <= TOP_FIELDS, set(results) - TOP_FIELDS
    assert isinstance(results["score"], int | float)
    for test in results["tests"]:
        assert set(test) <= TEST_FIELDS and test["status"] in ("passed", "failed"), test
    return results


def test_the_zip_has_gradescopes_entry_points_at_its_root_and_no_solution(
    autograder_zip: Path,
) -> None:
    with zipfile.ZipFile(autograder_zip) as archive:
        names = archive.namelist()
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
        texts = {n: archive.read(n).decode() for n in names if n.endswith((".py", ".sh"))}
    assert names[:3] == ["setup.sh", "run_autograder", "rubric.toml"]
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert "grader/pyproject.toml" in names and "grader/labkit/grading/grader.py" in names
    assert not any(n.startswith(("solutions/", "grader/solutions/")) for n in names)
    assert leaks(texts) == []


@pytest.mark.slow
def test_a_correct_proxy_scores_full_marks(tmp_path: Path, autograder_zip: Path) -> None:
    root = _root(tmp_path, autograder_zip)
    shutil.copy(REFERENCE, root / "submission" / "proxy.py")
    results = _run(root)
    assert results["score"] == 100, results["output"]
    assert len(results["tests"]) == len(CHECK_IDS)
    assert all(t["status"] == "passed" for t in results["tests"])
    assert results["output_format"] == "md" and results["output"].startswith("# Feedback")
    [board] = results["leaderboard"]
    assert board["order"] == "asc" and board["value"] >= 0


@pytest.mark.slow
def test_a_broken_proxy_fails_its_check(tmp_path: Path, autograder_zip: Path) -> None:
    root = _root(tmp_path, autograder_zip)
    write_variant("no_usage", tmp_path)
    shutil.copy(tmp_path / "no_usage.py", root / "submission" / "proxy.py")
    results = _run(root)
    failed = [t["name"].split(":")[0] for t in results["tests"] if t["status"] == "failed"]
    assert failed == ["usage"]
    assert results["score"] == round(100 * (len(CHECK_IDS) - 1) / len(CHECK_IDS), 2)


def test_a_syntax_error_scores_zero_with_a_message(tmp_path: Path, autograder_zip: Path) -> None:
    root = _root(tmp_path, autograder_zip)
    (root / "submission" / "proxy.py").write_text("def broken(:\n")
    results = _run(root)
    assert results["score"] == 0
    assert "proxy.py has a syntax error" in results["output"]


def test_a_misnamed_file_is_graded_and_the_feedback_says_so(
    tmp_path: Path, autograder_zip: Path
) -> None:
    root = _root(tmp_path, autograder_zip)
    stubbed, _ = strip_solutions(REFERENCE.read_text(), kind="code", notebook="02_forwarding_proxy")
    (root / "submission" / "my_proxy.py").write_text(stubbed)
    results = _run(root)
    assert results["output"].startswith(
        "There was no proxy.py, so my_proxy.py was graded as your proxy."
    )
    assert results["score"] == 0 and "not written yet" in results["tests"][0]["output"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "Nothing was submitted. Upload proxy.py"),
        ({"02_forwarding_proxy.ipynb": "{}"}, "You uploaded a notebook."),
        ({"a.py": "", "b.py": ""}, "Your upload has no proxy.py but several Python files"),
    ],
)
def test_an_upload_without_a_proxy_gets_a_message_that_says_what_to_upload(
    tmp_path: Path, autograder_zip: Path, files: dict[str, str], message: str
) -> None:
    root = _root(tmp_path, autograder_zip)
    for name, text in files.items():
        (root / "submission" / name).write_text(text)
    results = _run(root)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith(message)


def test_a_grader_that_cannot_start_still_leaves_results(
    tmp_path: Path, autograder_zip: Path
) -> None:
    root = _root(tmp_path, autograder_zip, venv=tmp_path / "no-such-venv")
    shutil.copy(REFERENCE, root / "submission" / "proxy.py")
    results = _run(root)
    assert results["score"] == 0
    assert results["output"].startswith("The grader could not start (exit status 127)")


def test_a_whole_repository_upload_finds_the_learners_proxy(tmp_path: Path) -> None:
    """GitHub uploads carry the learner bundle: its packages are not the submission."""
    (tmp_path / "labkit" / "grading").mkdir(parents=True)
    (tmp_path / "labkit" / "grading" / "proxy.py").write_text("")
    (tmp_path / "mock_upstream").mkdir()
    (tmp_path / "mock_upstream" / "app.py").write_text("")
    (tmp_path / "proxy.py").write_text("app = None\n")
    assert find_submission(tmp_path).path == tmp_path / "proxy.py"
    (tmp_path / "proxy.py").unlink()
    with pytest.raises(NotGradable, match="Nothing was submitted"):
        find_submission(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a full install from PyPI: 30 s idle here, minutes on a busy machine
def test_setup_sh_installs_the_grader_into_a_fresh_venv(
    tmp_path: Path, autograder_zip: Path
) -> None:
    """As far as this machine allows: from a clean copy of the zip, into a new AUTOGRADER_ROOT
    (Python >= 3.11 is here already, so apt-get is not needed; PyPI is)."""
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["AUTOGRADER_ROOT"] = str(root)
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")],
        env=env,
        cwd=root / "source",
        capture_output=True,
        timeout=900,
    )
    elapsed = time.monotonic() - started
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, output[-3000:]
    assert "setup.sh: learner code will run in: " in output
    # the grader runs the locked versions, not the newest its ranges allow
    for pin in ("openai==", "anthropic==", "uvicorn=="):
        locked = next(line for line in locked_requirements() if line.startswith(pin))
        name = pin.rstrip("=")
        installed = subprocess.run(
            [
                str(root / "venv" / "bin" / "python"),
                "-c",
                f"import importlib.metadata as m; print(m.version({name!r}))",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert f"{name}=={installed}" == locked
    shown = subprocess.run(
        [str(root / "venv" / "bin" / "labkit"), "grade", "--help"], capture_output=True
    )
    assert shown.returncode == 0
    print(f"setup.sh took {elapsed:.0f} s")


def test_grade_with_gradescope_writes_results_even_for_a_missing_file(tmp_path: Path) -> None:
    target = tmp_path / "results" / "results.json"
    assert main(["grade", str(tmp_path / "proxy.py"), "--gradescope", str(target)]) == 2
    results = json.loads(target.read_text())
    assert results["score"] == 0 and results["output"].startswith("There is no file")
