"""The grader installs on its own: the grader's lock (no JupyterLab, kernel, nbconvert or aiohttp)
is what every grading platform installs, it is much smaller than the learner's runtime, and it
grades the reference to full marks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from grading_support import REFERENCE

from labkit.grading.autograder import GRADER_LOCK

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_LOCK = ROOT / "labkit" / "bundle_files" / "requirements.txt"
LOCK_IN_REPO = GRADER_LOCK.relative_to(ROOT).as_posix()
UV = Path(sys.executable).parent / "uv"


def test_the_containerfile_installs_the_grader_lock_before_it_copies_the_code() -> None:
    lines = (ROOT / "Containerfile").read_text().splitlines()
    install = next(i for i, ln in enumerate(lines) if "pip install" in ln and "-r " in ln)
    mount = f"RUN --mount=type=bind,source={LOCK_IN_REPO},target=/tmp/grader.txt \\"
    assert lines[install - 1] == mount and lines[install].strip().endswith(
        "-r /tmp/grader.txt && rm -rf /root/.cache"
    )
    first_code = next(i for i, ln in enumerate(lines) if ln.startswith("COPY labkit "))
    assert install < first_code
    assert not [ln for ln in lines[:install] if ln.startswith("COPY")]


def test_the_kubernetes_job_names_its_image_and_pull_policy() -> None:
    job = yaml.safe_load((ROOT / "docs" / "cluster" / "grade-job.yaml").read_text())
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    name, _, tag = container["image"].rpartition(":")
    assert name and tag and tag != "latest", container["image"]


def test_the_actions_matrix_installs_the_grader_lock_then_the_lab_without_resolving() -> None:
    workflow = yaml.safe_load((ROOT / "docs" / "cluster" / "grade-matrix.yml").read_text())
    for job in workflow["jobs"].values():
        runs = "\n".join(s.get("run", "") for s in job["steps"])
        assert f"pip install --quiet -r {LOCK_IN_REPO}" in runs
        assert "pip install --quiet --no-deps ." in runs
        assert "git+" not in runs


def _install(lock: Path, venv: Path) -> tuple[int, int]:
    """Install ``lock`` into a new ``venv`` with uv; returns (packages, megabytes)."""
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(UV), "venv", "--quiet", "--python", str(python), str(venv)], check=True)
    subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "--quiet",
            "--link-mode=copy",
            "--python",
            str(venv / "bin" / "python"),
            "-r",
            str(lock),
        ],
        check=True,
    )
    listed = subprocess.run(
        [str(UV), "pip", "list", "--format=json", "--python", str(venv / "bin" / "python")],
        check=True,
        capture_output=True,
        text=True,
    )
    size = subprocess.run(["du", "-sm", str(venv)], check=True, capture_output=True, text=True)
    return len(json.loads(listed.stdout)), int(size.stdout.split()[0])


@pytest.mark.slow
@pytest.mark.timeout(900)  # two installs from PyPI (uv's cache makes them seconds the second time)
@pytest.mark.sockets
def test_the_grader_alone_is_much_smaller_and_grades_the_reference_to_full_marks(
    tmp_path: Path,
) -> None:
    grader = _install(GRADER_LOCK, tmp_path / "grader")
    runtime = _install(RUNTIME_LOCK, tmp_path / "runtime")
    print(f"grader: {grader[0]} packages, {grader[1]} MB; runtime: {runtime[0]}, {runtime[1]} MB")
    assert grader[0] <= 0.6 * runtime[0] and grader[1] <= 0.6 * runtime[1], (grader, runtime)

    venv = tmp_path / "grader"
    subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--python",
            str(venv / "bin" / "python"),
            str(ROOT),
        ],
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        [str(venv / "bin" / "labkit"), "grade", str(REFERENCE), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(done.stdout)
    not_passed = {
        i: (c["status"], c["verdict"], c["evidence"])
        for i, c in report["checks"].items()
        if c["status"] != "passed"
    }
    assert report["score"] == report["max_score"] == 100, (report["problem"], not_passed)
    absent = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import jupyterlab"], capture_output=True, text=True
    )
    assert re.search(r"No module named 'jupyterlab'", absent.stderr)
