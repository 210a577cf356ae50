"""Gradescope, simulated: the autograder zip unpacked into a temporary AUTOGRADER_ROOT, a
submission in ``submission/``, ``run_autograder`` run as Gradescope runs it. Whatever was
uploaded, a valid ``results/results.json`` comes out."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from grading_support import REFERENCE, expected_failures, write_variant

from labkit.checks import CHECK_IDS, CheckResult
from labkit.checks.result import INCONCLUSIVE
from labkit.cli import main
from labkit.grading.autograder import COURSE, GRADER_LOCK, write_gradescope_zip
from labkit.grading.gradescope import (
    NotGradable,
    find_submission,
    results_for,
    results_table,
    run,
)
from labkit.grading.gradescope import main as gradescope_main
from labkit.grading.notebook_parts import course_notebooks
from labkit.grading.report import SubmissionReport
from labkit.grading.roster import notebooks_beside
from labkit.grading.rubric import Rubric
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


def _cents(points: Any) -> int:
    return sum(round(p * 100) for p in points)


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


def _part_ids() -> list[str]:
    return [p.id for nb in course_notebooks(ROOT / "notebooks") for p in nb.parts]


def test_the_zip_carries_the_notebook_parts_course_without_a_solution(
    autograder_zip: Path,
) -> None:
    with zipfile.ZipFile(autograder_zip) as archive:
        planned = archive.read(COURSE).decode()
    assert leaks({COURSE: planned}) == []
    assert "BEGIN SOLUTION" not in planned
    stems = [nb["stem"] for nb in json.loads(planned)]
    assert stems == [nb.stem for nb in course_notebooks(ROOT / "notebooks")]


def test_a_submission_zip_or_loose_notebooks_are_found_beside_proxy_py(tmp_path: Path) -> None:
    """What `make submit` writes (proxy.py and notebooks/ in a zip), and an upload of loose
    files: both are graded with their notebooks."""
    upload = tmp_path / "zip"
    upload.mkdir()
    with zipfile.ZipFile(upload / "submission.zip", "w") as archive:
        archive.write(REFERENCE, "proxy.py")
        archive.writestr("notebooks/08_providers_and_normalisation.ipynb", "{}")
    found = find_submission(upload).path
    assert found.read_text() == REFERENCE.read_text()
    notebooks = notebooks_beside(found)
    assert notebooks is not None and [p.name for p in notebooks.iterdir()] == [
        "08_providers_and_normalisation.ipynb"
    ]
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(REFERENCE, loose / "proxy.py")
    (loose / "09_tool_calls_and_partial_json.ipynb").write_text("{}")
    assert notebooks_beside(find_submission(loose).path) == loose
    (loose / "09_tool_calls_and_partial_json.ipynb").unlink()
    assert notebooks_beside(find_submission(loose).path) is None
    (upload / "submission.zip").write_bytes(b"not a zip")
    with pytest.raises(NotGradable, match=r"Upload the submission\.zip that `make submit` writes"):
        find_submission(upload)


@pytest.mark.slow
@pytest.mark.sockets
def test_a_correct_proxy_scores_full_marks(tmp_path: Path, autograder_zip: Path) -> None:
    """Handed in as `make submit` writes it: a zip of proxy.py and notebooks/."""
    root = _root(tmp_path, autograder_zip)
    with zipfile.ZipFile(root / "submission" / "submission.zip", "w") as archive:
        archive.write(REFERENCE, "proxy.py")
        for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            archive.write(notebook, f"notebooks/{notebook.name}")
    results = _run(root)
    assert results["score"] == 100, results["output"]
    names = [t["name"].split(":")[0] for t in results["tests"]]
    assert names == [*CHECK_IDS, *_part_ids()]
    assert all(t["status"] == "passed" for t in results["tests"])
    assert "| nb08.adapter | passed |" in results["output"]
    assert _cents(t["score"] for t in results["tests"]) == 100_00  # not 99.97
    assert _cents(t["max_score"] for t in results["tests"]) == 100_00
    assert results["output_format"] == "md" and results["output"].startswith("# Feedback")
    [board] = results["leaderboard"]
    assert board["order"] == "asc" and board["value"] >= 0


@pytest.mark.slow
@pytest.mark.sockets
def test_a_broken_proxy_fails_its_check(tmp_path: Path, autograder_zip: Path) -> None:
    root = _root(tmp_path, autograder_zip)
    write_variant("no_usage", tmp_path)
    shutil.copy(tmp_path / "no_usage.py", root / "submission" / "proxy.py")
    results = _run(root)
    failed = [t["name"].split(":")[0] for t in results["tests"] if t["status"] == "failed"]
    fails = expected_failures("no_usage")  # usage, and the checks that read a cancelled line
    # proxy.py alone: every notebook part scores 0, saying what to upload
    assert failed == [*(i for i in CHECK_IDS if i in fails), *_part_ids()]
    parts = [t for t in results["tests"] if t["name"].startswith("nb")]
    assert all("make submit" in t["output"] for t in parts), parts[0]
    allotted = Rubric().allot([*CHECK_IDS, *_part_ids()])  # the checks' share: 75, in cents
    assert results["score"] == round(sum(allotted[i] for i in CHECK_IDS if i not in fails), 2)
    assert _cents(t["score"] for t in results["tests"]) == round(results["score"] * 100)


@pytest.mark.sockets
def test_a_syntax_error_scores_zero_with_a_message(tmp_path: Path, autograder_zip: Path) -> None:
    root = _root(tmp_path, autograder_zip)
    (root / "submission" / "proxy.py").write_text("def broken(:\n")
    results = _run(root)
    assert results["score"] == 0
    assert "proxy.py has a syntax error" in results["output"]


@pytest.mark.sockets
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
@pytest.mark.sockets
def test_an_upload_without_a_proxy_gets_a_message_that_says_what_to_upload(
    tmp_path: Path, autograder_zip: Path, files: dict[str, str], message: str
) -> None:
    root = _root(tmp_path, autograder_zip)
    for name, text in files.items():
        (root / "submission" / name).write_text(text)
    results = _run(root)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith(message)


@pytest.mark.sockets
def test_a_grader_that_cannot_start_still_leaves_results_with_no_score(
    tmp_path: Path, autograder_zip: Path
) -> None:
    """Bug: a grader whose Python could not start gave the learner a score of 0. Fix: the
    grader's own fault is no grade: results without a score, and run_autograder's exit status
    is the grader's (the grader's environment check: tests/grading/test_grader_environment.py).
    """
    root = _root(tmp_path, autograder_zip, venv=tmp_path / "no-such-venv")
    shutil.copy(REFERENCE, root / "submission" / "proxy.py")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root)}
    done = subprocess.run(["bash", str(root / "run_autograder")], env=env, capture_output=True)
    assert done.returncode == 127, done.stderr.decode()
    results = json.loads((root / "results" / "results.json").read_text())
    assert set(results) <= TOP_FIELDS and "score" not in results and "tests" not in results
    assert results["output"].startswith(
        "The grader could not start (exit status 127), so your file was not graded and no "
        "score was given: the grader's environment is broken"
    )


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


FAKE_APT = """#!/bin/sh
echo "$*" >> "$APT_LOG"
exit 0
"""


SYSTEM_PREFIXES = (Path("/usr"), Path("/usr/local"))  # a distribution's Python, not standalone


def _managed_python(install_dir: Path) -> Path:
    """This interpreter's base CPython laid out where ``uv python install`` keeps the Pythons
    it manages, so that uv finds it installed instead of downloading one (this machine reaches
    PyPI only; the download is the one step of setup.sh this test cannot take). Hard links,
    except the files uv rewrites on install, which are copies."""
    version = ".".join(map(str, sys.version_info[:3]))
    target = install_dir / f"cpython-{version}-linux-{platform.machine()}-gnu"
    source = Path(sys.base_prefix)
    skipped = shutil.ignore_patterns("site-packages", "test", "__pycache__", "idlelib", "tkinter")
    shutil.copytree(source, target, symlinks=True, ignore=skipped, copy_function=os.link)
    (
        target
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "site-packages"
    ).mkdir()
    for path in target.rglob("*"):
        rewritten = path.name.startswith("_sysconfigdata_") or path.suffix == ".pc"
        if rewritten or path.name.endswith("-config"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                path.unlink()
                path.write_bytes(data)
    return target


@pytest.mark.slow
@pytest.mark.timeout(900)  # uv and the grader's lock from PyPI: a minute idle here
@pytest.mark.sockets
def test_setup_sh_installs_a_released_python_with_uv_and_the_grader(
    tmp_path: Path, autograder_zip: Path
) -> None:
    """As far as this machine allows, on the path Gradescope's Ubuntu 22.04 takes: from a
    clean copy of the zip into a new AUTOGRADER_ROOT, with an apt-get that only records what it
    was asked; uv comes from PyPI, and the Python it would download is already in uv's folder.
    Nothing asks apt-get for Ubuntu's python3.11 (a release candidate on 22.04)."""
    if Path(sys.base_prefix) in SYSTEM_PREFIXES:
        pytest.skip(
            f"this Python is the system's ({sys.base_prefix}): the test lays a standalone CPython "
            "out as uv keeps one, copied from a standalone one (pyenv's or uv's)"
        )
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "apt-get").write_text(FAKE_APT)
    (fake / "apt-get").chmod(0o755)
    managed = _managed_python(root / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        AUTOGRADER_ROOT=str(root),
        APT_LOG=str(tmp_path / "apt.log"),
        PATH=f"{fake}{os.pathsep}{env['PATH']}",
    )
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
    if _others_can_enter(Path(sys.base_prefix)):
        assert done.returncode == 0, output[-3000:]
    else:
        # The copied Python finds its libpython through this interpreter's absolute path, under
        # a folder other users cannot enter (/root here): issue 46's broken grader. setup.sh
        # installs everything, then its check of the grading user's Python refuses the image.
        assert done.returncode != 0, output[-3000:]
        assert "the grader's environment is broken" in output, output[-3000:]
        assert "it ran another Python" in output, output[-3000:]
    asked = (tmp_path / "apt.log").read_text() if (tmp_path / "apt.log").exists() else ""
    assert "python3.11" not in asked, asked
    used = re.search(r"setup\.sh: using (\S+) \(Python 3\.11\.\d+\)", output)
    assert used is not None, output[-2000:]
    assert Path(used.group(1)).resolve().is_relative_to(managed)  # uv's, never the system's
    assert "setup.sh: learner code will run in: " in output
    venv_python = root / "venv" / "bin" / "python"
    probe = (
        "import sys, importlib.metadata as m; "
        "print(sys.version_info.releaselevel, sys.base_prefix); "
        "print(*(f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions()), sep='\\n')"
    )
    shown = subprocess.run([str(venv_python), "-c", probe], capture_output=True, text=True)
    level, prefix = shown.stdout.splitlines()[0].split(" ", 1)
    assert level == "final" and Path(prefix).resolve() == managed
    installed = {line.lower().replace("_", "-") for line in shown.stdout.splitlines()[1:]}
    for pin in _pins(GRADER_LOCK):
        assert pin in installed, pin  # the grader's lock, exactly
    assert not any(
        line.startswith(("jupyterlab==", "ipykernel==", "aiohttp==")) for line in installed
    )
    grade_help = subprocess.run([str(root / "venv" / "bin" / "labkit"), "grade", "--help"])
    assert grade_help.returncode == 0
    print(f"setup.sh took {elapsed:.0f} s")


def _others_can_enter(folder: Path) -> bool:
    """Whether a user who is neither owner nor in the group can reach ``folder``."""
    return all(os.stat(part).st_mode & 0o001 for part in [folder, *folder.parents])


def _pins(lock: Path) -> list[str]:
    lines = lock.read_text().splitlines()
    return [ln.strip().lower() for ln in lines if "==" in ln and not ln.startswith("#")]


def test_setup_sh_never_installs_ubuntus_python(autograder_zip: Path) -> None:
    with zipfile.ZipFile(autograder_zip) as archive:
        script = archive.read("setup.sh").decode()
    commands = [ln for ln in script.splitlines() if not ln.lstrip().startswith("#")]
    assert not any("python3.11" in ln for ln in commands)
    assert any('"$UV" python install --no-bin' in ln for ln in commands)
    assert any("--managed-python" in ln for ln in commands)


def test_every_text_names_ubuntu_22_04_only() -> None:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts.append(ROOT / "labkit" / "bundle_files" / "gradescope_setup.sh")
    for path in texts:
        assert "24.04" not in path.read_text(), f"{path.relative_to(ROOT)} names Ubuntu 24.04"


def _report(results: list[CheckResult], rubric: Rubric | None = None) -> SubmissionReport:
    return SubmissionReport("proxy.py", "proxy.py", results, rubric or Rubric())


def _undecided(check_id: str) -> CheckResult:
    return CheckResult(
        check_id, False, "inconclusive: the mock was too busy", {INCONCLUSIVE: "slow"}, "", True
    )


@pytest.mark.parametrize("policy", ["leave_out", "award"])
def test_an_undecided_check_is_not_shown_as_passed(policy: str) -> None:
    results = [CheckResult(i, True, "ok") for i in CHECK_IDS if i != "backpressure"]
    report = _report([*results, _undecided("backpressure")], Rubric(inconclusive=policy))
    shown = results_for(report)
    [test] = [t for t in shown["tests"] if t["name"].startswith("backpressure")]
    assert test["status"] == "failed" and test["name"].endswith("(not decided)")
    assert test["output"].startswith("Not decided: the grader's machine was too slow")
    if policy == "leave_out":
        assert test["score"] == test["max_score"] == 0
    else:
        assert test["score"] == test["max_score"] > 0
    assert _cents(t["score"] for t in shown["tests"]) == round(shown["score"] * 100)
    assert shown["score"] == 100  # never costs a point


@pytest.mark.parametrize("failing", list(CHECK_IDS))
def test_the_tests_add_up_to_the_score_whichever_check_fails(failing: str) -> None:
    results = [CheckResult(i, i != failing, "ok" if i != failing else "no") for i in CHECK_IDS]
    shown = results_for(_report(results))
    assert _cents(t["max_score"] for t in shown["tests"]) == 100_00
    assert _cents(t["score"] for t in shown["tests"]) == round(shown["score"] * 100)
    score = shown["score"]  # the feedback shows it as the table does: 92.3 for 92.31
    assert f"Score: **{score:g} / 100**" in shown["output"] or (
        f"Score: **{score:.1f} / 100**" in shown["output"]
    )


def test_labkit_autograder_gradescope_prints_the_points_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rubric = tmp_path / "rubric.toml"
    rubric.write_text("max_score = 40\n")
    assert (
        main(
            ["autograder", "gradescope", "--out", str(tmp_path / "a.zip"), "--rubric", str(rubric)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Set the assignment's autograder points to 40 in Gradescope" in out
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        assert archive.read("requirements.txt") == GRADER_LOCK.read_bytes()


@pytest.mark.parametrize("kind", ["syntax_error", "stubbed"])
@pytest.mark.sockets
def test_grade_gradescope_writes_what_run_autograder_writes(tmp_path: Path, kind: str) -> None:
    """`labkit grade FILE --gradescope` and Gradescope's own entry point, on the same file:
    the same results, but for the time each took."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    source = (
        "def broken(:\n"
        if kind == "syntax_error"
        else strip_solutions(REFERENCE.read_text(), kind="code", notebook="02_forwarding_proxy")[0]
    )
    (root / "submission" / "proxy.py").write_text(source)
    from_run = run(root)
    target = tmp_path / "cli" / "results.json"
    main(["grade", str(root / "submission" / "proxy.py"), "--gradescope", str(target)])
    from_cli = json.loads(target.read_text())
    assert from_run == json.loads((root / "results" / "results.json").read_text())
    for results in (from_run, from_cli):
        results.pop("execution_time")
        # each grading runs the file in a temporary folder of its own
        results["output"] = re.sub(r"labkit-worker-\w+/labkit-grade-\w+", "TMP", results["output"])
    assert from_cli == from_run
    assert from_run["output_format"] == "md" and from_run["score"] == 0


def test_grade_with_gradescope_writes_results_even_for_a_missing_file(tmp_path: Path) -> None:
    target = tmp_path / "results" / "results.json"
    assert main(["grade", str(tmp_path / "proxy.py"), "--gradescope", str(target)]) == 2
    results = json.loads(target.read_text())
    assert results["score"] == 0 and results["output"].startswith("There is no file")


def test_the_learners_table_shows_each_test_as_gradescope_lists_it() -> None:
    """``--show`` (the bundle's ``make grade``): the marks, points and names of the results'
    own tests, their output under them, and the results' score."""
    results = [CheckResult(i, i != "usage", "ok" if i != "usage" else "no") for i in CHECK_IDS]
    shown = results_for(_report([*results[:-1], _undecided(CHECK_IDS[-1])]))
    lines = results_table(shown).splitlines()
    [usage] = [t for t in shown["tests"] if t["name"].startswith("usage:")]
    at = next(n for n, line in enumerate(lines) if line.endswith(usage["name"]))
    assert lines[at].split()[:2] == ["FAIL", f"0/{usage['max_score']:g}"]
    assert lines[at + 1].strip() == "no"
    assert lines[0].split()[0] == "PASS"
    assert any(line.split()[0] == "????" for line in lines if "(not decided)" in line)
    passed = sum(t["status"] == "passed" for t in shown["tests"])
    assert lines[-1] == (
        f"Score: {shown['score']:g}/100 ({passed} of {len(shown['tests'])} tests passed)"
    )


def test_show_prints_the_message_writes_the_feedback_and_exits_1_when_nothing_is_graded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "submission").mkdir()
    feedback = tmp_path / "feedback.md"
    assert gradescope_main(["--root", str(tmp_path), "--show", "--feedback", str(feedback)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Nothing was submitted. Upload proxy.py")
    assert feedback.read_text().startswith("Nothing was submitted.")
    assert json.loads((tmp_path / "results" / "results.json").read_text())["score"] == 0
