"""Shipping the lab's own packages elsewhere: the learner bundle and the Gradescope autograder.

Both carry copies of ``labkit`` and ``mock_upstream`` and a ``pyproject.toml`` that installs
them with the pins this distribution was built with, so a learner's machine, Binder and a
Gradescope container all run the code and versions the lessons were written against.
Templates live in ``labkit/bundle_files`` and use ``@NAME@`` placeholders. Both install from
``RUNTIME_LOCK`` (``bundle_files/requirements.txt``: every runtime package at the exact version
`make lock` resolved), then the copied packages with ``--no-deps``.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
from pathlib import Path

import labkit
import mock_upstream
from labkit.errors import BundleError

__all__ = [
    "DISTRIBUTION",
    "RUNTIME_LOCK",
    "SHIPPED_AS",
    "TEMPLATES",
    "copy_packages",
    "installed_distribution",
    "locked_requirements",
    "pyproject",
    "render",
    "requirements",
]

DISTRIBUTION = "streaming-proxy-lab"
# the same packages as installed by the learner bundle and by the Gradescope autograder
SHIPPED_AS = ("streaming-proxy-lab", "streaming-proxy-lab-learner", "streaming-proxy-lab-grader")
TEMPLATES = Path(__file__).parent / "bundle_files"
RUNTIME_LOCK = TEMPLATES / "requirements.txt"


def installed_distribution() -> str:
    """The name labkit is installed under here (``DISTRIBUTION`` when none is found)."""
    for name in SHIPPED_AS:
        try:
            importlib.metadata.metadata(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return DISTRIBUTION


def requirements() -> list[str]:
    """This distribution's runtime requirements, with their version ranges."""
    requires = importlib.metadata.requires(DISTRIBUTION) or []
    return [r for r in requires if "extra ==" not in r]


def locked_requirements() -> list[str]:
    """The runtime lock's pins (``name==version``), without pip-compile's comments."""
    lines = RUNTIME_LOCK.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if "==" in line and not line.startswith("#")]


def copy_packages(into: Path) -> None:
    """Copy ``labkit`` and ``mock_upstream`` (sources only) into the folder ``into``."""
    for package in (Path(labkit.__file__).parent, Path(mock_upstream.__file__).parent):
        shutil.copytree(
            package, into / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


def render(name: str, **values: str) -> str:
    """The template ``name`` with every ``@KEY@`` replaced; a key left unset is an error."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    leftover = re.search(r"@[A-Z_]+@", text)
    if leftover:
        raise BundleError(
            f"Expected a value for every @KEY@ of the bundle template {name}, got none for "
            f"{leftover.group(0)}: pass render() one for it."
        )
    return text


def pyproject(name: str, description: str) -> str:
    """A ``pyproject.toml`` that installs the copied packages under ``name``, with the pins."""
    pip_lines = "\n".join(f'    "{r}",' for r in requirements())
    return render(
        "pyproject.toml.in",
        NAME=name,
        DESCRIPTION=description,
        VERSION=importlib.metadata.version(DISTRIBUTION),
        DEPENDENCIES=pip_lines,
    )
