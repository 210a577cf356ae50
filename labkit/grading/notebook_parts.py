"""The in-notebook parts a learner writes, graded by the checks their notebooks already run.

Notebooks 01, 03, 05, 07, 08, 09 and 11 to 14 judge what a learner writes in the notebook
itself (a timing client, a gzip strategy, what ``pass_on`` sends, a heartbeat's wait, an
adapter, a scanner and a transcript, a release policy, an nginx location, a prediction of the
chat page's states) with
:class:`labkit.notebook_checks.NotebookChecks`. The grader runs those same check cells,
headless, on the learner's code only. This module decides
*what* runs; ``labkit.grading.notebook_grader`` runs it in the sandbox and reads the verdicts.

Which cells run, for one notebook, in the notebook's order:

* **setup**: the instructor's cells tagged ``graded-setup`` (imports, constants, the helpers
  and servers the checks use). Each top-level ``if`` whose test calls ``checks.needs(...)`` (or
  reads a name assigned from such a call) is an experiment, not a definition: it is left out,
  so a graded run skips what the learner watches and goes straight to the checks.
* **part**: each instructor cell that holds a solution region (:mod:`labkit.regions`) is
  replaced by the *learner's* cell that defines the same function or class (the region's
  top-level ``def``/``class``): the cell with the same cell id if it still defines it, else
  the last code cell that does, its experiments left out as above. When none does, the
  instructor's cell with its regions stubbed runs instead, so the check says "not written yet".
* **check**: the instructor's cells tagged ``graded-check``, as they are: the judges are the
  instructor's, so a learner cannot edit one to pass (what their code can do to a judge from
  inside the same process is ``labkit.grading.notebook_grader``'s last paragraph).

A ``%%proxy_part`` cell writes part of ``proxy.py`` (notebooks 02 to 07, 10 and 15), and
``labkit grade`` grades it with ``proxy.py``. When a check cell's ``needs`` name its function
(05's ``pass_on``, 07's ``next_item``), it is a part of its own as well, run as the notebook runs
it: the learner's cell, its magic line and all, writes its functions into a private copy of
``proxy.py`` *as handed out* (``proxy_scaffold``: the reference's solution regions stubbed, as
``labkit student`` stubs them) and gives the run those functions (``labkit.proxy_file``'s
magic), so they see the file's settings, given helpers and imports, and the check judges them.
Only that cell is the learner's: a function it calls from another part meets its stub, and the
learner's ``proxy.py`` plays no part. A ``%%proxy_part`` cell no check names is not run here.

Every other cell (plots, timings, the learner's own experiments) is not run, and of the setup
cells' top-level statements, a value, an import or a function no cell reads (a capture for a
plot, a proxy started for an experiment, ``matplotlib.pyplot``, a helper that draws) and a
``print`` are left out too. The learner's notebook supplies only the part
cells' source; everything else comes from the instructor's notebook, with any solution region
stubbed, so that no solution reaches the sandbox.

A grader packaged for a platform (the Gradescope zip, the learner bundle's Classroom workflow)
carries no instructor notebook: ``write_course`` plans the course into ``course.json`` (the
graded cells, solutions stubbed, and the parts), which ``course_notebooks`` reads instead.

A *part* (one graded row) is one ``checks.check(name, ..., needs=...)`` call of a check cell
whose ``needs`` name a function or class of a part cell (directly, or through a tuple assigned
to a name, like notebook 11's ``GATEWAY``). Its id is ``nbNN.name`` (``nb08.adapter``). A check
whose needs name no in-notebook part judges ``proxy.py`` only (notebook 13's ``trickle``
through nginx), which ``labkit grade`` grades already: it runs, but is no row of its own.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from labkit.errors import GradingError
from labkit.regions import PART_MAGIC, part_cell_body, regions, strip_solutions

__all__ = [
    "CHECK_TAG",
    "COURSE_FILE",
    "SETUP_TAG",
    "CourseCell",
    "CourseNotebook",
    "NotebookCell",
    "NotebookRun",
    "Part",
    "course_json",
    "course_notebooks",
    "graded_stems",
    "learner_run",
    "notebook_cells",
    "part_id",
    "proxy_scaffold",
    "read_course",
    "scaffold_file",
    "write_course",
]

SETUP_TAG = "graded-setup"
COURSE_FILE = "course.json"  # a planned course, for a grader packaged without the notebooks
CHECK_TAG = "graded-check"
SOLUTION = Path("solutions") / "proxy.py"  # the reference, beside the instructor's notebooks
Role = Literal["setup", "part", "check"]
_SECTION = re.compile(r"^# (?P<step>\d\d) · ", re.MULTILINE)


def part_id(notebook: str, check: str) -> str:
    """``nb08.adapter``: the row id of check ``check`` of notebook ``08_...``."""
    return f"nb{notebook[:2]}.{check}"


def scaffold_file(notebook: str) -> str:
    """The private ``proxy.py`` a graded run of ``notebook`` writes its proxy parts into."""
    return f"proxy_{notebook}.py"


def proxy_scaffold(notebooks: Path, solution: Path | None = None) -> str:
    """``proxy.py`` as the learner bundle hands it out: the reference ``solution`` (default:
    ``../solutions/proxy.py`` beside ``notebooks``) with each solution region stubbed in the
    name of the notebook whose ``# NN · ...`` section holds it (importable: a stand-in runs
    where there is one). Raises ``GradingError`` when there is no reference there."""
    solution = solution or notebooks.parent / SOLUTION
    try:
        source = solution.read_text(encoding="utf-8")
    except OSError:
        raise GradingError(
            f"Expected the reference {solution} beside the notebooks in {notebooks}: a "
            "notebook's %%proxy_part check runs the learner's cell in proxy.py as handed out, "
            "made from it. Grade from a checkout of the lab's repository."
        ) from None
    stems = {path.stem[:2]: path.stem for path in notebooks.glob("[0-9][0-9]_*.ipynb")}
    owners: dict[int, str] = {}
    current = ""
    for number, line in enumerate(source.split("\n"), start=1):
        if section := _SECTION.match(line):
            current = stems.get(section["step"], "")
        owners[number] = current
    stubbed, _ = strip_solutions(
        source, kind="code", owner=lambda region: owners[region.line], importable=True
    )
    return stubbed


def _proxy_cell(notebook: str, body: str) -> str:
    """A ``%%proxy_part`` cell of ``body`` that writes into the run's private ``proxy.py``."""
    return f"{PART_MAGIC} {scaffold_file(notebook)}\n{body}"


@dataclass(frozen=True)
class Part:
    """One graded row: a notebook's check, and the learner's definitions it judges."""

    notebook: str  # "08_providers_and_normalisation"
    check: str  # "adapter"
    judges: tuple[str, ...]  # ("to_openai",)

    @property
    def id(self) -> str:
        return part_id(self.notebook, self.check)


@dataclass(frozen=True)
class CourseCell:
    """One cell a graded run needs, from the instructor's notebook (solutions stubbed)."""

    role: Role
    cell_id: str
    source: str
    owners: tuple[str, ...] = ()  # for a part cell: the top-level defs and classes it writes

    @property
    def writes_proxy(self) -> bool:
        """Whether it is a ``%%proxy_part`` cell (a part of ``proxy.py``, checked here too)."""
        return part_cell_body(self.source) is not None


@dataclass(frozen=True)
class CourseNotebook:
    """What the grader needs of one instructor notebook: its graded cells and its parts."""

    stem: str
    cells: tuple[CourseCell, ...]
    parts: tuple[Part, ...]
    scaffold: str = ""  # proxy.py as handed out, when a check judges a %%proxy_part cell


@dataclass(frozen=True)
class NotebookRun:
    """The cells one learner's notebook runs, in order: what the sandboxed child executes."""

    notebook: str
    cells: tuple[tuple[Role, str], ...]
    taken: tuple[str, ...] = ()  # the learner's definitions found in their notebook
    files: tuple[tuple[str, str], ...] = ()  # (name, text) to write where it runs, first

    def to_json(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "cells": [list(cell) for cell in self.cells]}


def _python(source: str) -> str:
    """The cell as plain Python: as it is when it parses, else with IPython's ``%magic`` and
    ``!shell`` lines transformed (IPython is imported only then: it takes a second)."""
    try:
        ast.parse(source)
        return source
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager

        return str(TransformerManager().transform_cell(source))  # type: ignore[no-untyped-call]


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(_python(source))
    except SyntaxError:
        return None


def _owners(source: str) -> tuple[str, ...]:
    """The top-level ``def``s and ``class``es that hold the cell's solution regions."""
    tree = _parse(source)
    if tree is None:
        return ()
    owners: list[str] = []
    for region in regions(source):
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            end = node.end_lineno or node.lineno
            if node.lineno <= region.line <= end and node.name not in owners:
                owners.append(node.name)
    return tuple(owners)


def _calls_needs(node: ast.AST, flags: set[str]) -> bool:
    """Whether ``node`` calls ``checks.needs(...)`` or reads a name assigned from one."""
    for inner in ast.walk(node):
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr == "needs"
            and isinstance(inner.func.value, ast.Name)
            and inner.func.value.id == "checks"
        ):
            return True
        if isinstance(inner, ast.Name) and inner.id in flags:
            return True
    return False


def without_experiments(source: str) -> str:
    """``source`` with each top-level experiment (``if checks.needs(...):``) blanked out, line
    numbers kept; as it is when it does not parse."""
    tree = _parse(source)
    if tree is None:
        return source
    lines = _python(source).split("\n")
    flags: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and _calls_needs(node.value, set()):
            flags |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.If) and _calls_needs(node.test, flags):
            for number in range(node.lineno - 1, node.end_lineno or node.lineno):
                lines[number] = ""
    return "\n".join(lines)


def _imports(node: ast.Import | ast.ImportFrom) -> set[str] | None:
    """The names an import binds (``import a.b`` binds ``a``); ``None`` for ``*`` and
    ``__future__``, which are always kept."""
    if isinstance(node, ast.ImportFrom) and (
        node.module == "__future__" or any(alias.name == "*" for alias in node.names)
    ):
        return None
    return {alias.asname or alias.name.split(".")[0] for alias in node.names}


def _targets(node: ast.stmt) -> set[str] | None:
    """The names a top-level statement only binds (``a = ...``, ``a, b = ...``, an import, an
    undecorated ``def`` or ``class``) or, for a bare ``print(...)``, none; ``None`` for any other
    statement (it is always kept)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return _imports(node)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return None if node.decorator_list else {node.name}  # a decorator may register it
    if (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "print"
    ):
        return set()
    if not isinstance(node, ast.Assign):
        return None
    names: set[str] = set()
    for target in node.targets:
        for inner in ast.walk(target):
            if isinstance(inner, ast.Name):
                names.add(inner.id)
            elif not isinstance(inner, ast.Tuple | ast.List | ast.Store):
                return None  # a subscript or an attribute: it changes something else
    return names


def _read_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def without_unread(cells: Sequence[tuple[Role, str]]) -> tuple[tuple[Role, str], ...]:
    """``cells`` with each setup cell's values and imports that no cell reads (a capture kept
    for a plot, a proxy started for an experiment, ``matplotlib.pyplot``: an import can cost a
    second of CPU, per learner) and its ``print`` calls blanked out, line numbers kept.
    Learner and check cells are kept whole; a value read anywhere (in any function) is kept."""
    trees = [_parse(source) for _, source in cells]
    statements = [
        (n, node) for n, tree in enumerate(trees) if tree is not None for node in tree.body
    ]
    dropped: set[int] = set()
    while True:
        reads: set[str] = set()
        for index, (_, node) in enumerate(statements):
            if index not in dropped:
                reads |= _read_names(node)
        more = {
            index
            for index, (n, node) in enumerate(statements)
            if index not in dropped
            and cells[n][0] == "setup"
            and (binds := _targets(node)) is not None
            and not binds & reads
        }
        if not more:
            break
        dropped |= more
    out: list[tuple[Role, str]] = []
    for n, (role, source) in enumerate(cells):
        blank = [node for index, (m, node) in enumerate(statements) if m == n and index in dropped]
        if not blank:
            out.append((role, source))
            continue
        lines = _python(source).split("\n")
        for node in blank:
            for number in range(node.lineno - 1, node.end_lineno or node.lineno):
                lines[number] = ""
        out.append((role, "\n".join(lines)))
    return tuple(out)


def _names(node: ast.AST | None) -> list[str]:
    if node is None:
        return []
    return [inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name)]


def _tuples(cells: Iterable[CourseCell]) -> dict[str, ast.AST]:
    """Top-level ``NAME = (a, b, ...)`` of the graded cells: what a ``needs=NAME`` expands to."""
    found: dict[str, ast.AST] = {}
    for cell in cells:
        tree = _parse(cell.source)
        for node in tree.body if tree is not None else []:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value
    return found


def _checks(source: str) -> list[tuple[str, ast.AST | None]]:
    """``(name, needs)`` of each ``checks.check("name", ..., needs=...)`` call in ``source``."""
    tree = _parse(source)
    found: list[tuple[str, ast.AST | None]] = []
    for node in ast.walk(tree) if tree is not None else []:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "check"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "checks"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            needs = next((k.value for k in node.keywords if k.arg == "needs"), None)
            found.append((node.args[0].value, needs))
    return found


def _parts(stem: str, cells: Sequence[CourseCell]) -> tuple[Part, ...]:
    owners = [name for cell in cells for name in cell.owners]
    tuples = _tuples(cells)
    parts: list[Part] = []
    for cell in cells:
        if cell.role != "check":
            continue
        for name, needs in _checks(cell.source):
            named = _names(needs)
            for tuple_name in [n for n in named if n in tuples]:
                named += _names(tuples[tuple_name])
            judges = tuple(dict.fromkeys(n for n in named if n in owners))
            if judges and name not in {p.check for p in parts}:
                parts.append(Part(stem, name, judges))
    return tuple(parts)


@dataclass(frozen=True)
class NotebookCell:
    """A code cell of a notebook file, as the grader reads it."""

    source: str
    cell_id: str = ""
    tags: tuple[str, ...] = ()


def notebook_cells(content: bytes, name: str) -> list[NotebookCell]:
    """The code cells of the notebook file ``content`` (nbformat 4, read as JSON: nbformat's
    validation would cost a second a notebook). Raises ``ValueError`` saying why it is not
    one."""
    try:
        data = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name} is not a readable notebook ({exc})") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise ValueError(f"{name} has no cells: is it a notebook saved by JupyterLab?")
    found: list[NotebookCell] = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(map(str, source)) if isinstance(source, list) else str(source)
        metadata = cell.get("metadata")
        tags = metadata.get("tags", []) if isinstance(metadata, dict) else []
        found.append(NotebookCell(text, str(cell.get("id", "")), tuple(map(str, tags or []))))
    return found


def course_notebook(path: Path, solution: Path | None = None) -> CourseNotebook | None:
    """The graded cells and parts of the instructor's notebook ``path``; ``None`` when it has
    no ``graded-check`` cell (nothing of it is graded this way). ``solution`` is the reference
    ``proxy.py`` its proxy parts run in, stubbed (default: ``proxy_scaffold``'s)."""
    cells: list[CourseCell] = []
    for cell in notebook_cells(path.read_bytes(), path.name):
        body = part_cell_body(cell.source)
        if body is not None:  # a part of proxy.py: planned, kept below if a check names it
            stubbed, _ = strip_solutions(body, kind="code", notebook=path.stem, importable=True)
            source = _proxy_cell(path.stem, stubbed)
            cells.append(CourseCell("part", cell.cell_id, source, _owners(body)))
            continue
        stubbed, count = strip_solutions(cell.source, kind="code", notebook=path.stem)
        if count:
            cells.append(CourseCell("part", cell.cell_id, stubbed, _owners(cell.source)))
        elif CHECK_TAG in cell.tags:
            cells.append(CourseCell("check", cell.cell_id, cell.source))
        elif SETUP_TAG in cell.tags:
            cells.append(CourseCell("setup", cell.cell_id, without_experiments(cell.source)))
    if not any(cell.role == "check" for cell in cells):
        return None
    parts = _parts(path.stem, cells)
    judged = {name for part in parts for name in part.judges}
    cells = [c for c in cells if not c.writes_proxy or set(c.owners) & judged]
    scaffold = proxy_scaffold(path.parent, solution) if any(c.writes_proxy for c in cells) else ""
    return CourseNotebook(path.stem, tuple(cells), parts, scaffold)


def course_notebooks(folder: Path, solution: Path | None = None) -> list[CourseNotebook]:
    """Every instructor notebook of ``folder`` whose parts are graded, in course order; or,
    when ``folder`` holds a planned course (``COURSE_FILE``), the course planned in it.
    ``solution``: the reference ``proxy.py`` (default: beside ``folder``, ``SOLUTION``)."""
    planned = folder / COURSE_FILE
    if planned.is_file():
        return read_course(planned)
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    found = (course_notebook(path, solution) for path in paths)
    return [course for course in found if course is not None and course.parts]


def course_json(course: Sequence[CourseNotebook]) -> list[dict[str, Any]]:
    """``course`` as JSON: what a packaged grader reads instead of the instructor's notebooks."""
    return [
        {
            "stem": nb.stem,
            "cells": [[c.role, c.cell_id, c.source, list(c.owners)] for c in nb.cells],
            "parts": [[p.check, list(p.judges)] for p in nb.parts],
            "scaffold": nb.scaffold,
        }
        for nb in course
    ]


def read_course(path: Path) -> list[CourseNotebook]:
    """The course planned in ``path`` (``course_json``'s form). Raises ``ValueError`` saying
    how to write it again when it is not that."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [
            CourseNotebook(
                str(nb["stem"]),
                tuple(
                    CourseCell(role, str(cid), str(src), tuple(o))
                    for role, cid, src, o in nb["cells"]
                ),
                tuple(Part(str(nb["stem"]), str(check), tuple(j)) for check, j in nb["parts"]),
                str(nb["scaffold"]),
            )
            for nb in data
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is not a planned course ({exc}): package the grader again "
            "(`labkit autograder gradescope`, `labkit student`)."
        ) from None


def write_course(notebooks: Path, into: Path, solution: Path | None = None) -> list[CourseNotebook]:
    """Plan the course of the instructor's ``notebooks`` (solutions stubbed, as a learner's run
    takes them; ``solution``, the reference ``proxy.py``, as ``course_notebooks`` takes it) into
    ``into/COURSE_FILE``, for a grader packaged without the notebooks; returns the course."""
    course = course_notebooks(notebooks, solution)
    into.mkdir(parents=True, exist_ok=True)
    (into / COURSE_FILE).write_text(json.dumps(course_json(course), indent=1) + "\n")
    return course


def graded_stems(folder: Path) -> list[str]:
    """The notebooks of ``folder`` (or of its planned course) that have graded check cells."""
    planned = folder / COURSE_FILE
    if planned.is_file():
        return [nb.stem for nb in read_course(planned)]
    return [
        p.stem
        for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))
        if CHECK_TAG in p.read_text("utf-8")
    ]


def _defines(source: str, name: str) -> bool:
    return bool(re.search(rf"^(?:async\s+def|def|class)\s+{re.escape(name)}\b", source, re.M))


def _learner_cell(cells: Sequence[NotebookCell], course: CourseCell) -> str | None:
    """The learner's source for ``course`` (a part cell), or ``None`` if no cell defines it."""

    def holds(cell: NotebookCell) -> bool:
        return all(_defines(cell.source, name) for name in course.owners)

    same = [cell for cell in cells if cell.cell_id == course.cell_id and holds(cell)]
    found = same or [cell for cell in cells if holds(cell)]
    return found[-1].source if found and course.owners else None


def learner_run(course: CourseNotebook, learner: Sequence[NotebookCell]) -> NotebookRun:
    """The cells to run for ``learner``'s copy of ``course`` (see the module docstring)."""
    cells: list[tuple[Role, str]] = []
    taken: list[str] = []
    for cell in course.cells:
        source = cell.source
        if cell.role == "part":
            mine = _learner_cell(learner, cell)
            if mine is not None and cell.writes_proxy:
                body = part_cell_body(mine)
                source = _proxy_cell(course.stem, mine if body is None else body)
                taken += cell.owners
            elif mine is not None:
                source = without_experiments(mine)
                taken += cell.owners
        cells.append((cell.role, source))
    files = ((scaffold_file(course.stem), course.scaffold),) if course.scaffold else ()
    return NotebookRun(course.stem, without_unread(cells), tuple(taken), files)
