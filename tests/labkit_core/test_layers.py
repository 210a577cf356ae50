"""labkit's imports go one way: down the layers written at the top of ``labkit/__init__.py``.

Both packages we own are in the graph: ``labkit`` and ``mock_upstream``, the mock LLM server,
which is one unit in the lowest layer. labkit builds on it (its core counts tokens with the mock's
tokenizer and starts the mock; its checks shape requests with the mock's scenarios); it imports
nothing of labkit, so a child process that serves the mock loads no labkit. What a layer cannot
say, that importing the core stays cheap (no FastAPI, no Prometheus, no mock app), a test below
says by importing it in a fresh interpreter.

A module may import from its own layer and from the layers below it, never from one above: the
core (errors, the SSE and wire formats, capture, servers) knows nothing of checks; checks know
nothing of grading; grading knows nothing of the notebooks' surface, the CLI or the bundle maker.
Every import counts, at module level or inside a function (a lazy import still couples the
modules). ``import labkit`` (or ``import mock_upstream``) for the package's own path
(``labkit.__file__``) is not a dependency: each package loads its names on first use.

The layers are read from the package docstring, so the written architecture and the enforced
one are the same text.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import labkit
import mock_upstream

PACKAGES = (Path(labkit.__file__).parent, Path(mock_upstream.__file__).parent)
ROOTS = frozenset(package.name for package in PACKAGES)
PATH_ONLY = {"__file__", "__path__", "__name__"}


def layers() -> dict[str, int]:
    """Each top-level unit of labkit (``errors``, ``checks``...) and its layer, bottom first."""
    doc = labkit.__doc__ or ""
    block = doc.split("Layers, bottom first", 1)[1].split("\n\n", 2)[1]
    found: dict[str, int] = {}
    number = -1
    for line in block.strip().splitlines():
        if ":" in line:  # a new layer; a line without a name continues the one before
            number += 1
            line = line.split(":", 1)[1]
        found.update((unit, number) for unit in line.split())
    return found


def unit_of(module: str) -> str:
    """``labkit.checks.cancel`` -> ``checks``; ``labkit.wire`` -> ``wire``; every module of the
    mock (``mock_upstream.tokenizer``) -> ``mock_upstream``."""
    if module.split(".")[0] != "labkit":
        return module.split(".")[0]
    return module.split(".")[1] if "." in module else "labkit"


def module_name(path: Path) -> str:
    package = next(p for p in PACKAGES if path.is_relative_to(p))
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _uses_more_than_the_path(tree: ast.AST, root: str) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == root
        and node.attr not in PATH_ONLY
        for node in ast.walk(tree)
    )


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:`` (they do not run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(child.lineno for child in ast.walk(inner) if hasattr(child, "lineno"))
    return lines


def imports(
    source: str, module: str, is_package: bool = False, modules: frozenset[str] = frozenset()
) -> Iterator[str]:
    """The modules of ours (labkit's, the mock's) that ``module``'s source imports, anywhere in
    it. ``from P import N`` imports the module ``P.N`` when that is one of ``modules``, else
    ``P`` itself."""
    tree = ast.parse(source)
    skipped = _type_checking_only(tree)
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ROOTS and not _uses_more_than_the_path(tree, alias.name):
                    continue
                if alias.name.split(".")[0] in ROOTS:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = ".".join(base[: len(base) - node.level + 1])
                source_module = f"{package}.{node.module}" if node.module else package
            elif node.module and node.module.split(".")[0] in ROOTS:
                source_module = node.module
            else:
                continue
            for alias in node.names:
                submodule = f"{source_module}.{alias.name}"
                yield submodule if submodule in modules or not node.module else source_module


def graph() -> dict[str, set[str]]:
    paths = sorted(path for package in PACKAGES for path in package.rglob("*.py"))
    modules = frozenset(module_name(path) for path in paths)
    return {
        module_name(path): set(
            imports(path.read_text(), module_name(path), path.name == "__init__.py", modules)
        )
        for path in paths
    }


def upward(edges: dict[str, set[str]], layer: dict[str, int]) -> list[str]:
    wrong = []
    for module, targets in sorted(edges.items()):
        if module == "labkit":
            continue  # the package's surface re-exports from every layer, by design
        for target in sorted(targets):
            here, there = unit_of(module), unit_of(target)
            if here != there and layer[there] > layer[here]:
                wrong.append(
                    f"{module} (layer {layer[here]}) imports {target} (layer {layer[there]})"
                )
    return wrong


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles between modules (Tarjan's strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_of_labkit_and_the_mock_has_a_layer() -> None:
    layer = layers()
    units = {unit_of(name) for name in graph()} - {"labkit"}
    assert not units - layer.keys(), (
        f"{sorted(units - layer.keys())} have no layer: add each to the 'Layers, bottom first' "
        "list at the top of labkit/__init__.py, in the lowest layer whose modules it imports"
    )
    assert not layer.keys() - units, (
        f"the layers name units that do not exist: {layer.keys() - units}"
    )


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    wrong = upward(graph(), layers())
    assert not wrong, (
        "imports that go up a layer (see labkit/__init__.py): move the code to the layer that "
        "needs it, or pass what it needs down as an argument:\n" + "\n".join(wrong)
    )


def test_no_import_cycle_between_labkit_modules() -> None:
    found = [cycle for cycle in cycles(graph()) if "labkit" not in cycle]
    assert not found, f"import cycles: {found}"


def test_an_upward_import_is_caught() -> None:
    layer = {"errors": 0, "checks": 1, "grading": 2}
    edges = {
        "labkit.errors": {"labkit.checks.runner"},
        "labkit.checks.runner": {"labkit.errors"},
        "labkit.grading.grader": {"labkit.checks.runner"},
    }
    assert upward(edges, layer) == [
        "labkit.errors (layer 0) imports labkit.checks.runner (layer 1)"
    ]
    assert cycles(edges) == [["labkit.checks.runner", "labkit.errors"]]


def test_lazy_and_relative_imports_count_and_type_checking_ones_do_not() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import labkit\n"
        "from . import machine\n"
        "if TYPE_CHECKING:\n"
        "    from labkit.grading import grader\n"
        "def later():\n"
        "    from labkit.student import make_bundle\n"
        "    return labkit.__file__\n"
    )
    found = set(imports(source, "labkit.checks.cancel"))
    assert set(
        imports("from labkit.checks import cancel, CHECKS\n", "labkit.cli", False, MODULES)
    ) == {"labkit.checks.cancel", "labkit.checks"}
    assert found == {"labkit.checks.machine", "labkit.student"}
    assert set(imports("import labkit\nlabkit.run_checks()\n", "labkit.wire")) == {"labkit"}
    # the mock's modules are edges too; its package imported for its folder is not
    source = "import mock_upstream\nfrom mock_upstream.tokenizer import count_tokens\n"
    assert set(imports(source + "mock_upstream.__file__\n", "labkit.packaging")) == {
        "mock_upstream.tokenizer"
    }
    assert unit_of("mock_upstream.tokenizer") == unit_of("mock_upstream") == "mock_upstream"


MODULES = frozenset({"labkit.checks", "labkit.checks.cancel"})


def test_the_layers_are_written_where_a_reader_finds_them() -> None:
    assert re.search(r"Layers, bottom first", labkit.__doc__ or "")
    assert layers()["mock_upstream"] == 0
    assert layers()["errors"] == 1
    assert layers()["cli"] == max(layers().values())


def test_the_mock_imports_nothing_of_labkit() -> None:
    """The mock is the lowest layer: its child process (``mock_upstream.served``) and the
    ``mock-upstream`` command load no labkit, and labkit may build on any of it."""
    edges = graph()
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in edges.items()
        if unit_of(module) == "mock_upstream"
        for target in targets
        if unit_of(target) != "mock_upstream"
    )
    assert not wrong, (
        "mock_upstream is below labkit (labkit/__init__.py's layers): move what the mock needs "
        "into mock_upstream, or pass it in from labkit:\n" + "\n".join(wrong)
    )
    into_the_mock = {
        module
        for module, targets in edges.items()
        if unit_of(module) != "mock_upstream"
        and any(unit_of(target) == "mock_upstream" for target in targets)
    }
    assert "labkit._recorder" in into_the_mock, "the graph no longer sees labkit's edges into it"


# What the core must not load: a server, its framework, its metrics. The core imports the mock's
# tokenizer, and importing any module of a package runs the package's __init__ first.
SERVER_MODULES = ("fastapi", "starlette", "prometheus_client", "uvicorn", "mock_upstream.app")


@pytest.mark.sockets
def test_importing_labkit_capture_loads_no_server() -> None:
    """Bug: ``import labkit.capture`` loaded the whole mock app (FastAPI, Prometheus, every wire
    format) because ``labkit._recorder`` imports ``mock_upstream.tokenizer`` and
    ``mock_upstream/__init__.py`` imported the app: about 0.36 s of 0.5 s. Fix: the mock's
    package loads its names on first use (docs/architecture.md has the before and after)."""
    code = (
        "import sys, labkit.capture, mock_upstream.tokenizer, mock_upstream; "
        f"print(sorted(m for m in {SERVER_MODULES!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", (
        f"importing labkit.capture loaded {out.stdout.strip()}: a module of labkit's core or "
        "mock_upstream/__init__.py imports a server at module level; import it where it is used"
    )


# What no module of the core may load: the framework a web app is made with.
WEB_FRAMEWORKS = ("fastapi", "starlette", "mock_upstream.app")


@pytest.mark.sockets
def test_importing_the_core_loads_no_web_framework() -> None:
    """Bug: ``labkit.stream_gateway``, a FastAPI app with its metrics and policies, sat in the
    core only because of what it imports (``errors``, ``wire``), and importing it loaded
    FastAPI. Fix: a module that makes a web app goes no lower than services; every unit the
    docstring puts in the core is imported here, in a fresh interpreter."""
    core = sorted(unit for unit, number in layers().items() if number == layers()["errors"])
    found = f"print(sorted(m for m in {WEB_FRAMEWORKS!r} if m in sys.modules))"
    code = "; ".join(["import sys", *(f"import labkit.{unit}" for unit in core), found])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", (
        f"importing the core ({', '.join(core)}) loaded {out.stdout.strip()}: a module that "
        "makes a web app belongs in services (labkit/__init__.py's layers), or it imports the "
        "framework where the app is made"
    )


@pytest.mark.sockets
def test_the_gateways_policies_load_without_its_server() -> None:
    """``labkit.stream_gateway`` loads its names on first use: its release and restart
    policies are pure, and only ``make_stream_gateway`` (``_endpoint``) loads FastAPI."""
    code = (
        "import sys; from labkit.stream_gateway import Immediate, ReleasePolicy, RestartPolicy; "
        f"print(sorted(m for m in {(*SERVER_MODULES, 'jsonschema')!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", (
        f"importing the gateway's policies loaded {out.stdout.strip()}: labkit/stream_gateway/"
        "__init__.py or _policies.py imports the app; load it in _endpoint.py alone"
    )
