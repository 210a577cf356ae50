"""The learner's ``proxy.py``: found, written part by part from the notebooks, loaded fresh.

The deliverable grows notebook by notebook. Each "build it" cell starts with the cell magic
``%%proxy_part`` and holds whole top-level functions; running it replaces the functions of the
same names in ``proxy.py`` (decorators included) and leaves everything else alone, then gives
the notebook those functions as ``proxy.py`` now has them (imported afresh), for the notebook's
own check of them. Load the magic once per notebook with ``%load_ext labkit``.

A part cell may also hold what its functions need beside them: helper functions that
``proxy.py`` does not have yet, settings (``NAME = value``) and imports. They are written in a
block of their own just above the cell's first function, between two marker comments::

    # Written with read_events by its %%proxy_part cell (running it again replaces this):
    BETWEEN_EVENTS_S = 6.0
    # (end of what was written with read_events)

Running the cell again replaces the block, so editing a helper or dropping a setting in the
cell does the same in ``proxy.py``; a cell that adds nothing removes the block of its
functions. A name that ``proxy.py`` already uses elsewhere (a given setting, or a helper
another cell wrote) is refused, so a part cannot quietly change another part.

Where ``proxy.py`` is: ``$LAB_PROXY`` if set; else ``../proxy.py`` next to the notebooks folder
(the learner bundle); else ``../solutions/proxy.py`` (this repository's instructor copy).
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import itertools
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from labkit._source import run_source
from labkit.checks.result import CheckResult
from labkit.errors import ProxyFileError
from labkit.regions import PART_MAGIC_NAME

__all__ = [
    "ProxyFileError",
    "check_proxy",
    "find_proxy",
    "load_ipython_extension",
    "load_proxy",
    "part_functions",
    "write_part",
]

ENV_VAR = "LAB_PROXY"
_loads = itertools.count(1)


@dataclass(frozen=True)
class _Definition:
    name: str
    first: int  # 0-based index of its first line (a decorator's, if any)
    last: int  # 0-based index of its last line


@dataclass(frozen=True)
class _Statement:
    """One top-level statement of a part cell: a function, a setting or an import, the names it
    binds and its lines (0-based, the comment lines right above it included)."""

    kind: Literal["function", "setting", "import"]
    names: tuple[str, ...]
    first: int
    last: int


@dataclass(frozen=True)
class _Block:
    """The helpers and settings written with the functions ``owners``, lines first to last
    (0-based, both marker comments included)."""

    owners: tuple[str, ...]
    first: int
    last: int


_BLOCK_BEGIN = re.compile(
    r"^# Written with (?P<owners>\w+(?:, \w+)*) by its %%proxy_part cell \(running it again "
    r"replaces this\):$"
)
_BLOCK_END = re.compile(r"^# \(end of what was written with (?P<owners>\w+(?:, \w+)*)\)$")


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


def _parse(source: str, where: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise ProxyFileError(
            f"{where} is not valid Python (line {exc.lineno}: {exc.msg}). Fix that line and "
            "run the cell again."
        ) from None


def _setting_names(node: ast.stmt) -> tuple[str, ...] | None:
    """The names a simple assignment (``A = ...``, ``A: T = ...``) binds, else None."""
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        return tuple(t.id for t in node.targets if isinstance(t, ast.Name))
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
        return (node.target.id,)
    return None


def _import_names(node: ast.Import | ast.ImportFrom) -> tuple[str, ...]:
    return tuple((alias.asname or alias.name).split(".")[0] for alias in node.names)


def _cell_statements(source: str) -> list[_Statement]:
    """What a part cell holds, in order; raises if it holds anything else."""
    tree = _parse(source, "this cell")
    lines = source.split("\n")
    found: list[_Statement] = []
    for node in tree.body:
        first = node.lineno - 1
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            statement = _Statement("function", (node.name,), first, _last_line(lines, node))
        elif (names := _setting_names(node)) is not None:
            last = (node.end_lineno or 1) - 1
            while last + 1 < len(lines) and lines[last + 1].startswith("#"):
                last += 1  # a comment right below a setting goes with it (### END SOLUTION)
            statement = _Statement("setting", names, first, last)
        elif isinstance(node, ast.Import | ast.ImportFrom) and all(
            alias.name != "*" for alias in node.names
        ):
            statement = _Statement("import", _import_names(node), first, (node.end_lineno or 1) - 1)
        else:
            raise ProxyFileError(
                f"Line {node.lineno} of this cell is not a function, a setting (NAME = value) or "
                "an import. A %%proxy_part cell holds whole functions, and the helpers, settings "
                "and imports they need; put other code in a cell of its own."
            )
        found.append(statement)
    seen: set[str] = set()
    for statement in found:
        for name in statement.names:
            if name in seen and statement.kind != "import":
                raise ProxyFileError(
                    f"This cell defines {name} twice. Keep one definition of each name."
                )
            seen.add(name)
    return found


def _with_comments(lines: list[str], statement: _Statement, floor: int) -> int:
    """The first line of ``statement`` counting the comment lines right above it (not above
    ``floor``): a comment that explains a setting goes with it."""
    first = statement.first
    while first - 1 >= floor and lines[first - 1].startswith("#"):
        first -= 1
    return first


def _blocks(lines: list[str], where: str) -> list[_Block]:
    found: list[_Block] = []
    opened: tuple[int, tuple[str, ...]] | None = None
    for index, line in enumerate(lines):
        if begin := _BLOCK_BEGIN.match(line):
            if opened is not None:
                break  # reported below: the first block is never closed
            opened = (index, tuple(begin["owners"].split(", ")))
        elif (end := _BLOCK_END.match(line)) and opened is not None:
            owners = tuple(end["owners"].split(", "))
            if owners != opened[1]:
                break
            found.append(_Block(owners, opened[0], index))
            opened = None
    else:
        if opened is None:
            return found
    assert opened is not None
    owners_text = ", ".join(opened[1])
    raise ProxyFileError(
        f"{where}, line {opened[0] + 1}: the helpers written with {owners_text} are not closed by "
        f"'# (end of what was written with {owners_text})'. Put that line back after them, or "
        "delete the block and run the part's cell again."
    )


def _bound(node: ast.stmt) -> tuple[str, ...]:
    """The module-level names a statement of ``proxy.py`` binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return (node.name,)
    if isinstance(node, ast.Import | ast.ImportFrom):
        return _import_names(node)
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return tuple(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))


def _extras_block(owners: list[str], lines: list[str], extras: list[_Statement]) -> list[str]:
    """The marker comments around the cell's helpers, settings and imports, in the cell's order;
    two blank lines around a function, none between settings."""
    named = ", ".join(owners)
    block = [f"# Written with {named} by its %%proxy_part cell (running it again replaces this):"]
    previous: _Statement | None = None
    floor = 0
    for statement in extras:
        if previous is not None and "function" in (previous.kind, statement.kind):
            block += ["", ""]
        block += lines[_with_comments(lines, statement, floor) : statement.last + 1]
        previous, floor = statement, statement.last + 1
    if previous is not None and previous.kind == "function":
        block += ["", ""]
    return [*block, f"# (end of what was written with {named})"]


def _write(source: str, target: Path) -> tuple[list[str], list[str]]:
    """Write a part cell into ``target``; return the functions it replaced and the names it
    added beside them."""
    statements = _cell_statements(source)
    functions = [s for s in statements if s.kind == "function"]
    if not functions:
        raise ProxyFileError(
            "This cell defines no function. A %%proxy_part cell holds whole functions (def or "
            "async def), which replace the functions of the same names in proxy.py."
        )
    text = target.read_text(encoding="utf-8")
    tree = _parse(text, str(target))
    lines = text.split("\n")
    blocks = _blocks(lines, target.name)

    def block_of(line: int) -> _Block | None:
        return next((b for b in blocks if b.first <= line <= b.last), None)

    existing = {
        name: where
        for name, where in _definitions(text, str(target)).items()
        if block_of(where.first) is None
    }
    parts = [s.names[0] for s in functions if s.names[0] in existing]
    if not parts:
        missing = [s.names[0] for s in functions]
        raise ProxyFileError(
            f"{target.name} has no function named {', '.join(missing)}. A part replaces "
            f"functions that are already there ({', '.join(sorted(existing))}); keep the name "
            "from the notebook. A helper goes in the cell of the part that uses it."
        )
    replaced = [b for b in blocks if set(b.owners) & set(parts)]
    extras = [s for s in statements if not (s.kind == "function" and s.names[0] in parts)]
    for node in tree.body:
        home = block_of(node.lineno - 1)
        if home in replaced:
            continue
        for name in _bound(node):
            for extra in extras:
                is_import = isinstance(node, ast.Import | ast.ImportFrom)
                if name not in extra.names or (extra.kind == "import" and is_import):
                    continue
                if home is not None:
                    raise ProxyFileError(
                        f"{name} is already in {target.name}: another %%proxy_part cell wrote it "
                        f"with {', '.join(home.owners)}. Give this cell's {name} a name of its "
                        "own, or keep it in one of the two cells."
                    )
                raise ProxyFileError(
                    f"{name} is already defined in {target.name} (line {node.lineno}). A "
                    f"part's helpers and settings need names of their own: rename this cell's "
                    f"{name}, or change the one in {target.name} where it is."
                )

    cell_lines = source.strip("\n").split("\n")
    offset = len(source) - len(source.lstrip("\n"))
    shift = source[:offset].count("\n")
    shifted = [_Statement(s.kind, s.names, s.first - shift, s.last - shift) for s in statements]
    by_name = {s.names[0]: s for s in shifted if s.kind == "function"}
    extras = [s for s in shifted if not (s.kind == "function" and s.names[0] in parts)]
    skip: set[int] = set()
    for block in replaced:
        skip.update(range(block.first, block.last + 1))
        after = block.last + 1
        while after < len(lines) and after <= block.last + 2 and not lines[after].strip():
            skip.add(after)
            after += 1
    anchor = min(existing[name].first for name in parts)
    replacements = {existing[name].first: name for name in parts}
    out: list[str] = []
    index = 0
    while index < len(lines):
        if index == anchor and extras:
            out += [*_extras_block(parts, cell_lines, extras), "", ""]
        if index in replacements:
            name = replacements[index]
            out += cell_lines[by_name[name].first : by_name[name].last + 1]
            index = existing[name].last + 1
            continue
        if index not in skip:
            out.append(lines[index])
        index += 1
    updated = "\n".join(out)
    if updated != text:
        target.write_text(updated, encoding="utf-8")
    return parts, [name for s in extras for name in s.names]


def write_part(source: str, path: str | os.PathLike[str] | None = None) -> list[str]:
    """Put the top-level functions of ``source`` into ``proxy.py`` in place of the functions of
    the same names, and its helpers, settings and imports in a block just above them (see the
    module docstring); return the names written, in the cell's order. The file is written only
    if it changes.

    Raises :class:`ProxyFileError` when the cell or the file is not valid Python, when the cell
    replaces no function of ``proxy.py``, holds a statement that is none of those, or adds a
    name that ``proxy.py`` already uses elsewhere.
    """
    target = Path(path) if path is not None else find_proxy()
    parts, extras = _write(source, target)
    order = [name for s in _cell_statements(source) for name in s.names]
    return [name for name in order if name in parts or name in extras]


def load_proxy(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import ``proxy.py`` afresh (a new module each call, so an edited file is seen) without
    starting anything: its app runs only when served."""
    target = Path(path) if path is not None else find_proxy()
    name = f"learner_proxy_{next(_loads)}"
    try:
        return run_source(name, target)  # never a stale .pyc of an edited file
    finally:
        sys.modules.pop(name, None)  # one fresh module per call: none is kept


def _proxy_part(ipython: Any, line: str, cell: str) -> None:
    from IPython.core.error import UsageError  # shown as one line, without a traceback

    path = line.strip() or None
    try:
        target = Path(path) if path else find_proxy()
        parts, extras = _write(cell, target)
    except ProxyFileError as exc:
        raise UsageError(str(exc)) from None
    beside = f"; beside it: {', '.join(extras)}" if extras else ""
    print(f"{target.name}: wrote {', '.join(parts)}{beside}")  # the magic's only output
    try:
        module = load_proxy(target)
    except Exception as exc:  # the file does not import: the functions stay where they were
        raise UsageError(
            f"{target.name} does not import now ({type(exc).__name__}: {exc}), so this notebook "
            f"cannot use {', '.join(parts)} yet. Fix that, then run this cell again."
        ) from None
    ipython.user_ns.update({name: getattr(module, name) for name in parts})


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext labkit``: registers the ``%%proxy_part [path]`` cell magic. Running a part
    cell writes its functions into ``proxy.py`` (``write_part``) and gives the notebook those
    functions as the file now has them (a fresh ``load_proxy``, so they see its settings and
    given helpers), so that a check cell can call ``pass_on`` as it calls any part."""

    def proxy_part(line: str, cell: str) -> None:
        _proxy_part(ipython, line, cell)

    ipython.register_magic_function(proxy_part, magic_kind="cell", magic_name=PART_MAGIC_NAME)


def check_proxy(
    path: str | os.PathLike[str] | None = None, *, only: str | Iterable[str] | None = None
) -> list[CheckResult]:
    """Grade ``proxy.py`` the way ``labkit grade`` will, with the checks in ``only``.

    It starts mock upstreams and the proxy in child processes of its own, stops them again, and
    never raises because of what the proxy does: a part not written yet, a proxy that does not
    start, or a failed check each come back as a failed result with a hint. Blocking; works
    inside a Jupyter kernel. A top-level entry point: it reads this machine's CPUs once
    (``Budget.here()``) and grades for them, as ``labkit grade`` does.
    """
    from labkit.checks.machine import Budget  # the checks are heavy to import: load late
    from labkit.grading.grader import agrade_file

    target = Path(path) if path is not None else find_proxy()
    graded = agrade_file(target, only=only, budget=Budget.here())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="labkit-grade") as pool:
        report = pool.submit(asyncio.run, graded).result()
    if report.problem is None:
        return report.results
    problem = report.problem.message
    return [
        replace(r, hint=problem) if r.verdict.startswith("not run") else r for r in report.results
    ]
