"""The locks, environment.yml (for conda users) and pyproject.toml (the ranges) agree.

``requirements/dev.txt`` is what ``make`` installs; ``labkit/bundle_files/requirements.txt``
(the runtime part) is what the learner bundle, the Gradescope autograder and the
Containerfile install. Both come from ``make lock``.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _environment() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "environment.yml").read_text())
    return data


def _conda_deps() -> list[str]:
    return [d for d in _environment()["dependencies"] if isinstance(d, str)]


def _pip_deps() -> list[str]:
    for dep in _environment()["dependencies"]:
        if isinstance(dep, dict) and "pip" in dep:
            return list(dep["pip"])
    return []


def test_environment_uses_conda_forge_only() -> None:
    assert _environment()["channels"] == ["conda-forge"]


def test_environment_installs_the_locked_set_then_the_project() -> None:
    assert _pip_deps() == ["-r requirements/dev.txt", "-e ."]
    assert "dev" in _pyproject()["project"]["optional-dependencies"]


def _lock(path: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / path).read_text().splitlines():
        if line.startswith("#") or "==" not in line:
            continue
        name, version = line.strip().split("==")
        pins[canonicalize_name(name)] = Version(version)
    return pins


DEV_LOCK = _lock("requirements/dev.txt")
RUNTIME_LOCK = _lock("labkit/bundle_files/requirements.txt")


@pytest.mark.parametrize("extra", ["runtime", "dev"])
def test_every_requirement_is_locked_at_a_version_its_range_allows(extra: str) -> None:
    project = _pyproject()["project"]
    wanted = (
        project["dependencies"] if extra == "runtime" else project["optional-dependencies"]["dev"]
    )
    locks = [DEV_LOCK, RUNTIME_LOCK] if extra == "runtime" else [DEV_LOCK]
    for spec in map(Requirement, wanted):
        for lock in locks:
            version = lock.get(canonicalize_name(spec.name))
            assert version is not None, f"{spec.name} is not in the lock: run make lock"
            assert spec.specifier.contains(version, prereleases=True), (
                f"{spec.name}=={version} is locked, pyproject.toml asks for {spec}: run make lock"
            )


def test_the_runtime_lock_is_the_dev_lock_without_the_test_tools() -> None:
    for name, version in RUNTIME_LOCK.items():
        assert DEV_LOCK.get(name) == version, f"{name}: runtime {version}, dev {DEV_LOCK.get(name)}"
    assert "pytest" in DEV_LOCK and "pytest" not in RUNTIME_LOCK


def test_this_environment_runs_the_locked_versions() -> None:
    """What `make` installed is what the lock says (a stale .venv is rebuilt by make)."""
    for name in ("fastapi", "uvicorn", "httpx", "openai", "anthropic", "nbval"):
        assert Version(importlib.metadata.version(name)) == DEV_LOCK[name], name


def test_environment_brings_the_system_tools_the_lessons_use() -> None:
    names = {re.split(r"[<>=! ]", d, maxsplit=1)[0] for d in _conda_deps()}
    assert {"python", "pip", "nginx", "curl"} <= names


def test_environment_python_agrees_with_requires_python() -> None:
    requires = _pyproject()["project"]["requires-python"]  # e.g. ">=3.11"
    floor = re.fullmatch(r">=(\d+\.\d+)", requires)
    assert floor, f"requires-python should be a plain floor, got {requires!r}"
    python = next(d for d in _conda_deps() if d.startswith("python"))
    assert f">={floor.group(1)}" in python, (
        f"environment.yml asks for {python!r} but pyproject.toml requires {requires!r}"
    )


def test_lesson_critical_libraries_are_pinned_with_upper_bounds() -> None:
    deps = (
        _pyproject()["project"]["dependencies"]
        + _pyproject()["project"]["optional-dependencies"]["dev"]
    )
    critical = ["fastapi", "starlette", "uvicorn", "httpx", "openai", "anthropic", "ipykernel"]
    for name in [*critical, "nbval"]:
        spec = next((d for d in deps if re.match(rf"{name}\b(?!-)", d)), None)
        assert spec is not None, f"{name} is missing from pyproject.toml"
        assert "<" in spec, f"{name} needs an upper bound, got {spec!r}"
