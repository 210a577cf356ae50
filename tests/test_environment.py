"""The locks, environment.yml (for conda users) and pyproject.toml (the ranges) agree, and the
ranges are declared as the code imports them.

``requirements/dev.txt`` is what ``make`` installs; ``labkit/bundle_files/requirements.txt``
(the runtime part) is what the learner bundle and Binder install;
``labkit/bundle_files/grader-requirements.txt`` (``requirements/grader.in``: the grader alone)
is what the Gradescope autograder, GitHub Classroom, the Containerfile and the cluster recipes
install. All three come from ``make lock``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
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
GRADER_LOCK = _lock("labkit/bundle_files/grader-requirements.txt")
# What the grader imports none of: the lab's application, its kernel, and aiohttp.
NOT_FOR_THE_GRADER = (
    "jupyterlab",
    "jupyter-server",
    "nbconvert",
    "ipykernel",
    "aiohttp",
)


def _grader_in() -> list[Requirement]:
    lines = (ROOT / "requirements" / "grader.in").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


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
    assert {"python", "pip", "nginx", "curl", "redis-server"} <= names


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


def test_the_grader_set_is_pyprojects_ranges_for_what_the_grader_imports() -> None:
    declared = {canonicalize_name(Requirement(r).name): Requirement(r) for r in _runtime()}
    for spec in _grader_in():
        name = canonicalize_name(spec.name)
        assert name in declared, f"{spec.name} is in requirements/grader.in, not pyproject.toml"
        assert str(spec.specifier) == str(declared[name].specifier), (
            f"{spec.name}: grader.in says {spec.specifier}, pyproject.toml {declared[name]}"
        )
        assert name in GRADER_LOCK, f"{spec.name} is not in the grader's lock: run make lock"


def test_the_grader_lock_is_the_runtime_lock_without_the_lab() -> None:
    for name, version in GRADER_LOCK.items():
        assert RUNTIME_LOCK.get(name) == version, f"{name}: grader {version}, runtime lock differs"
    for name in NOT_FOR_THE_GRADER:
        assert name not in GRADER_LOCK, f"{name} is in the grader's lock"
        assert name in DEV_LOCK  # the lab and its tests still have it
    assert len(GRADER_LOCK) <= 0.6 * len(RUNTIME_LOCK), (len(GRADER_LOCK), len(RUNTIME_LOCK))


def test_the_learner_runtime_has_the_browser_and_the_hub_proxy() -> None:
    for lock in (RUNTIME_LOCK, DEV_LOCK):
        assert "playwright" in lock
        assert lock["jupyter-server-proxy"] == Version("4.6.0")


def _runtime() -> list[str]:
    return list(_pyproject()["project"]["dependencies"])


def _imports(source: str) -> set[str]:
    """The top-level names ``source`` imports (absolute imports; IPython magics skipped)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        kept = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        tree = ast.parse("\n".join(kept))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _lab_imports() -> set[str]:
    """Third-party names imported by labkit, mock_upstream and the notebooks."""
    names: set[str] = set()
    for path in [*(ROOT / "labkit").rglob("*.py"), *(ROOT / "mock_upstream").rglob("*.py")]:
        names |= _imports(path.read_text())
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code":
                names |= _imports("".join(cell["source"]))
    ours = {"labkit", "mock_upstream", "solutions", "proxy", "__future__"}
    return {n for n in names if n not in sys.stdlib_module_names and n not in ours}


# Declared without being imported: the applications the lab runs in, not libraries it calls.
APPLICATIONS = {"jupyterlab"}


def test_dependencies_are_declared_exactly_as_imported() -> None:
    distributions = importlib.metadata.packages_distributions()
    imported = {
        canonicalize_name(dist) for name in _lab_imports() for dist in distributions.get(name, [])
    }
    declared = {canonicalize_name(Requirement(r).name) for r in _runtime()}
    assert imported - declared == set(), "imported but not declared in pyproject.toml"
    assert declared - imported - APPLICATIONS == set(), "declared but imported nowhere"


def test_the_grader_lock_holds_what_the_graded_notebook_cells_import() -> None:
    """Gradescope and Classroom install the grader's lock alone: a module the notebook parts'
    cells import (or the runner's IPython) missing there scores every part 0 on them."""
    from labkit.grading.notebook_parts import course_json, course_notebooks
    from labkit.grading.notebook_runner import _imported

    modules = {"IPython"}
    for notebook in course_json(course_notebooks(ROOT / "notebooks")):
        for _role, _id, source, *_ in notebook["cells"]:
            modules |= {name.split(".")[0] for name in _imported(source)}
    distributions = importlib.metadata.packages_distributions()
    third_party = sorted(m for m in modules if m not in sys.stdlib_module_names and m != "labkit")
    assert {"IPython", "anthropic", "openai"} <= set(third_party)  # the course was read
    for module in third_party:
        names = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert names & set(GRADER_LOCK), f"{module} ({names}) is not in the grader's lock"


# Debian 12's python3, the one a user without pyenv or root has on the commonest server distro.
OLDEST_PYTHON = Version("3.11.2")


def test_every_locked_package_installs_on_the_oldest_python_we_support() -> None:
    """A pin whose Requires-Python excludes a 3.11 release fails every install on it: the lock
    once held soupsieve 4.1.3 (3.11.5 or later), and `make` failed on Debian 12's 3.11.2. The
    installed copies' metadata say what each pin requires (``make lock`` resolves with the
    oldest Python: ``make lock PYTHON=/usr/bin/python3.11`` there)."""
    assert Version(_pyproject()["project"]["requires-python"].removeprefix(">=")) <= OLDEST_PYTHON
    refused = {}
    for name in DEV_LOCK:
        requires = importlib.metadata.metadata(name).get("Requires-Python")
        if requires and OLDEST_PYTHON not in SpecifierSet(requires):
            refused[name] = requires
    assert refused == {}, f"locked packages that refuse Python {OLDEST_PYTHON}: {refused}"
