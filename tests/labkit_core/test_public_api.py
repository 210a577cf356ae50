"""The public surface: ``from labkit import ...`` is all a notebook writes."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

import labkit

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# `from labkit... import (a, b)` over several lines, or `from labkit... import a, b`.
IMPORT = re.compile(r"^from (labkit[\w.]*) import (?:\(([^)]*)\)|(.*)$)", re.M)


def test_all_is_sorted_and_every_name_exists() -> None:
    assert labkit.__all__ == sorted(labkit.__all__)
    assert len(set(labkit.__all__)) == len(labkit.__all__)
    assert sorted(labkit._WHERE) == labkit.__all__  # what loads on first use is the surface
    for name in labkit.__all__:
        assert hasattr(labkit, name), name


def _type_checking_imports(source: str) -> dict[str, str]:
    """Each name the ``if typing.TYPE_CHECKING:`` block of ``source`` imports, and from where."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING":
            for inner in node.body:
                assert isinstance(inner, ast.ImportFrom) and inner.module, ast.unparse(inner)
                for alias in inner.names:
                    assert alias.asname == alias.name, f"{alias.name}: re-export it as itself"
                    found[alias.name] = inner.module
    return found


def test_type_checkers_see_the_names_that_load_at_run_time() -> None:
    """mypy cannot run the lazy ``__getattr__``: it reads the ``TYPE_CHECKING`` imports, which
    must name exactly ``_WHERE``'s names, each from its module."""
    source = Path(labkit.__file__).read_text()
    block = "\n".join(
        f"    from {module} import {name} as {name}"
        for name, module in sorted(labkit._WHERE.items(), key=lambda item: (item[1], item[0]))
    )
    assert _type_checking_imports(source) == labkit._WHERE, (
        "labkit/__init__.py's `if typing.TYPE_CHECKING:` block and `_WHERE` differ; "
        f"replace the block's body with:\n{block}"
    )


def test_every_public_name_of_the_package_is_in_all() -> None:
    # httpx's test_exported_members: a name reachable as labkit.X is either in __all__ or
    # private. Submodules are the exception: they are how the names get here. The names load
    # on first use, so load them all first.
    for name in labkit.__all__:
        getattr(labkit, name)
    public = {
        name
        for name, value in vars(labkit).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert public == set(labkit.__all__)
    assert set(labkit.__all__) <= set(dir(labkit))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        labkit.serve_forever  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert str(exc) == "module 'labkit' has no attribute 'serve_forever'"
    else:
        raise AssertionError("labkit.serve_forever resolved")


@pytest.mark.sockets
def test_the_graders_children_import_only_what_they_serve() -> None:
    """Bug: ``python -m labkit.servers._child`` imported ``labkit`` whole (FastAPI, the mock,
    the checks) before the learner's proxy, and the grader's mock child imported the grader:
    0.3-0.5 s of CPU more for each of the processes a grading starts at once. Fix: ``labkit``
    loads its names on first use, and the mock's served app lives in ``mock_upstream``."""
    import subprocess
    import sys

    code = (
        "import sys, labkit.servers._child; "
        "print(sorted(m for m in ('fastapi', 'mock_upstream', 'labkit.capture', "
        "'labkit.checks', 'labkit.grading') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import sys, mock_upstream.served; print('labkit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _public(module: str, name: str) -> bool:
    """``from labkit import name``: in ``labkit.__all__``. ``from labkit.X import name``: in
    that module's ``__all__``, or one of its submodules (``from labkit.checks import cancel``,
    for a check's own constants)."""
    if module == "labkit":
        return name in labkit.__all__
    imported = importlib.import_module(module)
    if name in getattr(imported, "__all__", ()):
        return True
    return importlib.util.find_spec(f"{module}.{name}") is not None


def test_every_name_a_notebook_imports_from_a_labkit_module_is_public() -> None:
    imported: set[tuple[str, str]] = set()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            source = re.sub(r"#.*", "", source)
            for module, group, line in IMPORT.findall(source):
                names = re.split(r"[\s,]+", group or line)
                imported |= {(module, n) for n in names if n.isidentifier()}
    assert {"check_proxy", "serve", "start_nginx"} <= {n for _, n in imported}, "IMPORT is stale"
    assert sorted(f"{m}: {n}" for m, n in imported if not _public(m, n)) == []


def test_contract_signatures() -> None:
    params = inspect.signature(labkit.serve).parameters
    assert list(params) == ["app", "name", "host", "port", "start_timeout"]
    assert params["port"].default == 0 and params["start_timeout"].default == 5.0
    params = inspect.signature(labkit.serve_subprocess).parameters
    assert list(params) == [
        "target",
        "name",
        "env",
        "cwd",
        "host",
        "port",
        "start_timeout",
        "inherit_env",
    ]
    assert params["start_timeout"].default == 10.0
    capture_params = [
        "url",
        "json",
        "headers",
        "method",
        "disconnect_after_events",
        "disconnect_after_s",
        "read_interval_s",
        "timeout",
    ]
    assert list(inspect.signature(labkit.capture_stream).parameters) == capture_params
    assert list(inspect.signature(labkit.acapture_stream).parameters) == capture_params
    assert inspect.signature(labkit.capture_stream).parameters["method"].default == "POST"


@pytest.mark.sockets
def test_importing_labkit_does_not_import_matplotlib_or_start_anything() -> None:
    import subprocess
    import sys

    code = (
        "import sys, threading, labkit; "
        "print('matplotlib' in sys.modules, threading.active_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "1"]
    assert out.stderr == ""
