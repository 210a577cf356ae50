"""The learner's ``proxy.py``: found, written part by part from the notebooks, loaded fresh.

The deliverable grows notebook by notebook. Each "build it" cell starts with the cell magic
``%%proxy_part`` and holds whole top-level functions; running it replaces the functions of the
same names in ``proxy.py`` (decorators included) and leaves everything else alone. Load the
magic once per notebook with ``%load_ext labkit``.

Where ``proxy.py`` is: ``$LAB_PROXY`` if set; else ``../proxy.py`` next to the notebooks folder
(the learner bundle); else ``../solutions/proxy.py`` (this repository's instructor copy).
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import importlib.util
import itertools
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from labkit.checks.result import CheckResult
from labkit.errors import LabkitError

__all__ = [
    "PART_MAGIC",
    "ProxyFileError",
    "check_proxy",
    "find_proxy",
    "load_ipython_extension",
    "load_proxy",
    "part_functions",
    "write_part",
]

PART_MAGIC = "%%proxy_part"
ENV_VAR = "LAB_PROXY"
_loads = itertools.count(1)


class ProxyFileError(LabkitError):
    """``proxy.py`` is missing, is not valid Python, or a part does not fit into it."""


@dataclass(frozen=True)
class _Definition:
    name: str
    first: int  # 0-based index of its first line (a decorator's, if any)
    last: int  # 0-based index of its last line


def find_proxy() -> Path:
    """The learner's ``proxy.py`` (see the module docstring for where it is looked for)."""
    if configured := os.environ.get(ENV_VAR):
        path = Path(configured)
        if not path.is_file():
            raise ProxyFileError(
                f"{ENV_VAR} is {configured}, but there is no such file. Point {ENV_VAR} at "
                "your proxy.py, or unset it to use ../proxy.py."
            )
        return path
    here = Path.cwd()
    for candidate in (here.parent / "proxy.py", here.parent / "solutions" / "proxy.py"):
        if candidate.is_file():
            return candidate
    raise ProxyFileError(
        f"No proxy.py found: expected {here.parent / 'proxy.py'}, next to the notebooks folder. "
        f"Open the notebooks from the learner bundle (make lab), or set {ENV_VAR} to its path."
    )


def _definitions(source: str, where: str) -> dict[str, _Definition]:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProxyFileError(
            f"{where} is not valid Python (line {exc.lineno}: {exc.msg}). Fix that line and "
            "run the cell again."
        ) from None
    lines = source.split("\n")
    found: dict[str, _Definition] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            found[node.name] = _Definition(node.name, first, _last_line(lines, node))
    return found


def _last_line(lines: list[str], node: ast.stmt) -> int:
    """The 0-based index of a top-level definition's last line: the AST stops at its last
    statement, but indented comments after it (``### END SOLUTION``) belong to it too."""
    last = (node.end_lineno or node.lineno) - 1
    for index in range(last + 1, len(lines)):
        line = lines[index]
        if line.strip() and not line[0].isspace():
            break
        if line.strip():
            last = index
    return last


def part_functions(cell_source: str) -> list[str]:
    """The names of the top-level functions a part cell (magic line removed) defines."""
    return list(_definitions(cell_source, "this cell"))


def write_part(source: str, path: str | os.PathLike[str] | None = None) -> list[str]:
    """Put the top-level functions of ``source`` into ``proxy.py`` in place of the functions of
    the same names; return their names. The file is written only if it changes.

    Raises :class:`ProxyFileError` when the cell or the file is not valid Python, when the
    cell defines no function, holds other statements, or names a function ``proxy.py`` lacks.
    """
    target = Path(path) if path is not None else find_proxy()
    cell = _definitions(source, "this cell")
    if not cell:
        raise ProxyFileError(
            "This cell defines no function. A %%proxy_part cell holds whole functions (def or "
            "async def), which replace the functions of the same names in proxy.py."
        )
    tree = ast.parse(source)
    stray = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if stray:
        raise ProxyFileError(
            f"Line {stray[0].lineno} of this cell is not part of a function. A %%proxy_part "
            "cell holds only functions; put other code in a cell of its own."
        )
    text = target.read_text(encoding="utf-8")
    existing = _definitions(text, str(target))
    missing = [name for name in cell if name not in existing]
    if missing:
        raise ProxyFileError(
            f"{target.name} has no function named {', '.join(missing)}. A part replaces "
            f"functions that are already there ({', '.join(sorted(existing))}); keep the name "
            "from the notebook."
        )
    lines = text.split("\n")
    cell_lines = source.strip("\n").split("\n")
    for name in sorted(cell, key=lambda n: existing[n].first, reverse=True):
        where = existing[name]
        mine = cell[name]
        lines[where.first : where.last + 1] = cell_lines[mine.first : mine.last + 1]
    updated = "\n".join(lines)
    if updated != text:
        target.write_text(updated, encoding="utf-8")
    return list(cell)


def load_proxy(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import ``proxy.py`` afresh (a new module each call, so an edited file is seen) without
    starting anything: its app runs only when served."""
    target = Path(path) if path is not None else find_proxy()
    name = f"learner_proxy_{next(_loads)}"
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise ProxyFileError(f"{target} cannot be imported as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def _proxy_part(line: str, cell: str) -> None:
    from IPython.core.error import UsageError  # shown as one line, without a traceback

    path = line.strip() or None
    try:
        names = write_part(cell, path)
    except ProxyFileError as exc:
        raise UsageError(str(exc)) from None
    target = Path(path) if path else find_proxy()
    print(f"{target.name}: wrote {', '.join(names)}")  # the magic's only output


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext labkit``: registers the ``%%proxy_part [path]`` cell magic."""
    ipython.register_magic_function(_proxy_part, magic_kind="cell", magic_name="proxy_part")


def check_proxy(
    path: str | os.PathLike[str] | None = None, *, only: str | Iterable[str] | None = None
) -> list[CheckResult]:
    """Grade ``proxy.py`` the way ``labkit grade`` will, with the checks in ``only``.

    It starts mock upstreams and the proxy in child processes of its own, stops them again, and
    never raises because of what the proxy does: a part not written yet, a proxy that does not
    start, or a failed check each come back as a failed result with a hint. Blocking; works
    inside a Jupyter kernel.
    """
    from labkit.grading.grader import agrade_file  # the grader imports the checks: load late

    target = Path(path) if path is not None else find_proxy()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="labkit-grade") as pool:
        report = pool.submit(asyncio.run, agrade_file(target, only=only)).result()
    if report.problem is None:
        return report.results
    problem = report.problem.message
    return [
        replace(r, hint=problem) if r.verdict.startswith("not run") else r for r in report.results
    ]
