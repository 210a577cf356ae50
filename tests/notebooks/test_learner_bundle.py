"""The learner bundle: self-contained, no answer key in it or in what it installs, and its
Binder files do what repo2docker will do with them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from bundle_leaks import leaks, solution_lines

from labkit.student import make_bundle

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "lab"
    make_bundle(ROOT / "notebooks", ROOT / "solutions" / "proxy.py", out)
    return out


def _texts(root: Path) -> dict[str, str]:
    """Every file under ``root`` as text, archives opened member by member."""
    texts: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = str(path.relative_to(root))
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    texts[f"{name}!{member}"] = archive.read(member).decode(errors="replace")
        elif tarfile.is_tarfile(path):
            with tarfile.open(path) as archive:
                for member in archive.getmembers():
                    data = archive.extractfile(member) if member.isfile() else None
                    if data is not None:
                        texts[f"{name}!{member.name}"] = data.read().decode(errors="replace")
        else:
            texts[name] = path.read_bytes().decode(errors="replace")
    return texts


def test_the_bundle_has_what_a_learner_needs(bundle: Path) -> None:
    for name in ("README.md", "Makefile", "pyproject.toml", "proxy.py", ".gitignore"):
        assert (bundle / name).is_file(), name
    notebooks = sorted(p.name for p in (bundle / "notebooks").glob("*.ipynb"))
    assert notebooks == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert not (bundle / "solutions").exists()
    readme = (bundle / "README.md").read_text()
    assert "mybinder.org/badge_logo.svg" in readme and "make lab" in readme
    makefile = (bundle / "Makefile").read_text()
    assert "lab:" in makefile and "grade:" in makefile


@pytest.mark.sockets
def test_no_solution_line_reaches_the_bundle_or_what_it_installs(
    bundle: Path, tmp_path: Path
) -> None:
    secret = solution_lines()
    assert len(secret) > 50, "the solution regions hold real code"
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(bundle),
        ],
        check=True,
        capture_output=True,
    )
    assert list(wheels.glob("*.whl")), "the bundle builds a wheel"
    found = leaks(_texts(bundle) | _texts(wheels), secret)
    assert not found, "solution lines in the learner bundle:\n" + "\n".join(found[:20])


def test_the_binder_environment_is_what_repo2docker_can_build(bundle: Path) -> None:
    env = yaml.safe_load((bundle / "binder" / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert any(d.startswith("python") for d in conda) and "nginx" in conda
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert not any(line.startswith("-e") or line == "." for line in pip), "repo2docker: no -e ."
    assert any(line.startswith("fastapi") for line in pip)
    post_build = bundle / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK)
    assert post_build.read_text().startswith("#!/bin/bash\n")


@pytest.mark.slow
@pytest.mark.timeout(900)  # pip installs the whole runtime lock: over 200 s on a busy machine
@pytest.mark.sockets
def test_post_build_installs_the_bundle_in_a_fresh_environment(
    bundle: Path, tmp_path: Path
) -> None:
    """What repo2docker does, minus conda: the environment's pip list, then postBuild, run in
    a clean copy of the bundle; then the lab's commands work."""
    copy = tmp_path / "clean"
    shutil.copytree(bundle, copy)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = yaml.safe_load((copy / "binder" / "environment.yml").read_text())
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "setuptools>=70.1", *pip],
        check=True,
        capture_output=True,
        timeout=600,
    )
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    subprocess.run(
        ["bash", "binder/postBuild"],
        cwd=copy,
        check=True,
        capture_output=True,
        env={**os.environ, "PATH": path},
        timeout=300,
    )
    shown = subprocess.run(
        [str(venv / "bin" / "labkit"), "grade", "proxy.py", "--only", "trickle"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 1, shown.stderr
    assert "not written yet: make_client, chat_completions (notebook 02_forwarding_proxy)" in (
        shown.stdout
    )
    assert (venv / "bin" / "jupyter-lab").exists()
