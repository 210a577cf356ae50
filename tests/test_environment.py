"""environment.yml (for conda users) must agree with pyproject.toml (the one source of pins)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

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


def test_environment_installs_the_project_with_its_dev_extra() -> None:
    assert _pip_deps() == ["-e .[dev]"]
    assert "dev" in _pyproject()["project"]["optional-dependencies"]


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
