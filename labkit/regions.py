"""Solution regions: the instructor's code between ``### BEGIN SOLUTION`` and ``### END SOLUTION``.

The delimiters follow the nbgrader convention. A learner copy replaces each region with a stub
at the region's own indentation. In code the stub says which function to write and in which
notebook, and either raises::

    # YOUR CODE HERE: relay, notebook 04_cancel_on_disconnect
    raise NotImplementedError("Write this part yourself: relay, in notebook 04_cancel_...")

or, when the region starts with ``### STAND-IN:`` lines, runs those lines instead. A stand-in
is the naive version a later notebook shows breaking (an unbounded queue, httpx's 5 s default),
so the proxy keeps working for the notebooks before it::

    ### BEGIN SOLUTION
    ### STAND-IN: return asyncio.Queue()
    return asyncio.Queue(maxsize=LIMIT)
    ### END SOLUTION

Code that must import (``proxy.py``, and the ``%%proxy_part`` cells written into it) is stubbed
with ``importable=True``: there a region at module level, such as a setting a part cell adds,
cannot raise, so it must have a stand-in, and becomes a comment and its stand-in lines.

In markdown (a verification question's answer) the region becomes a prompt for the learner's
own answer. ``unwritten`` finds the stubs again, so the grader can say which part is missing.

A part cell is one whose magic line is ``%%proxy_part`` (``PART_MAGIC``): running it writes its
functions into ``proxy.py`` (``labkit.proxy_file`` registers the magic by ``PART_MAGIC_NAME``).
``part_cell_body`` is the one recogniser, read as IPython reads a cell magic, for every module that
must tell a part cell from another: the bundle maker stubs it importable, the notebook grader
leaves it to ``proxy.py``'s checks. It lives here, in the lowest layer that needs it, so that
the grading layer can use it as well as the surface (``proxy_file``, ``student``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from labkit.errors import SolutionRegionError

__all__ = [
    "ANSWER_PROMPT",
    "BEGIN",
    "END",
    "PART_MAGIC",
    "PART_MAGIC_NAME",
    "STAND_IN",
    "Region",
    "SolutionRegionError",
    "Unwritten",
    "part_cell_body",
    "regions",
    "strip_solutions",
    "unwritten",
]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STAND_IN = "### STAND-IN:"
ANSWER_PROMPT = "_Write your answer here._"
PART_MAGIC_NAME: Final = "proxy_part"  # the cell magic's name, as IPython registers it
PART_MAGIC: Final = f"%%{PART_MAGIC_NAME}"  # how a part cell's first line starts
STUB_MARK = "# YOUR CODE HERE: "
_STUB = re.compile(r"# YOUR CODE HERE: (?P<function>[\w.]+), notebook (?P<notebook>\w+)")
_DEF = re.compile(r"^(?P<indent>\s*)(?:async\s+)?def\s+(?P<name>\w+)\s*\(")


@dataclass(frozen=True)
class Region:
    """One solution region of a source: the function it sits in, its solution and stand-in
    lines (without the delimiters), and where it starts (1-based line of its BEGIN)."""

    function: str
    line: int
    indent: str
    solution: tuple[str, ...]
    stand_in: tuple[str, ...]


@dataclass(frozen=True)
class Unwritten:
    """A stub left in a learner's file: which function, and the notebook that writes it."""

    function: str
    notebook: str


def part_cell_body(source: str) -> str | None:
    """The body of ``source`` (the lines after its magic line) when it is a ``%%proxy_part``
    cell, else ``None``. Read as IPython reads a cell magic: blank lines before it are
    skipped; the next line's first word, up to a space, is the magic (the rest of the line is
    its argument, a path). ``%%proxy_partial``, ``# %%proxy_part`` or an indented
    ``%%proxy_part`` is not one."""
    rest = source
    while True:  # IPython drops the blank lines before a cell magic
        line, newline, after = rest.partition("\n")
        if line.strip() or not newline:
            break
        rest = after
    first, _, body = rest.partition("\n")
    return body if first.rstrip().partition(" ")[0] == PART_MAGIC else None


def _enclosing_function(lines: list[str], index: int, indent: str) -> str:
    for line in reversed(lines[:index]):
        match = _DEF.match(line)
        if match and len(match["indent"]) < len(indent):
            return match["name"]
    return "this part"


def regions(source: str, *, where: str = "this source") -> list[Region]:
    """Every solution region of ``source``, in order.

    Raises :class:`SolutionRegionError` when a BEGIN has no END, or an END has no BEGIN.
    """
    lines = source.split("\n")
    found: list[Region] = []
    start: int | None = None
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if start is not None:
                raise SolutionRegionError(
                    f"{where}: line {number} opens a solution region inside another one. "
                    f"Close the first with '{END}' before opening the next."
                )
            start, body = number, []
        elif stripped == END:
            if start is None:
                raise SolutionRegionError(
                    f"{where}: line {number} closes a solution region that was never opened. "
                    f"Add '{BEGIN}' above it or delete it."
                )
            opening = lines[start - 1]
            indent = opening[: len(opening) - len(opening.lstrip())]
            stand_in = tuple(
                part.strip().removeprefix(STAND_IN).removeprefix(" ")
                for part in body
                if part.strip().startswith(STAND_IN)
            )
            solution = tuple(part for part in body if not part.strip().startswith(STAND_IN))
            function = _enclosing_function(lines, start - 1, indent)
            found.append(Region(function, start, indent, solution, stand_in))
            start = None
        elif start is not None:
            body.append(line)
    if start is not None:
        raise SolutionRegionError(
            f"{where}: a solution region is never closed. Add '{END}' after the solution."
        )
    return found


def _code_stub(region: Region, notebook: str, *, importable: bool = False) -> list[str]:
    mark = f"{region.indent}{STUB_MARK}{region.function}, notebook {notebook}"
    if importable and not region.indent:
        if not region.stand_in:
            raise SolutionRegionError(
                f"{notebook}: the solution region at line {region.line} is at module level, "
                "where a stub cannot raise (proxy.py would not import). Give it a stand-in, "
                f"e.g. '{STAND_IN} LIMIT = None', or move it into a function."
            )
        return [f"{STUB_MARK}settings for this part (notebook {notebook})", *region.stand_in]
    if region.stand_in:
        return [
            f"{mark}. Until then, this stand-in runs:",
            *(f"{region.indent}{line}" for line in region.stand_in),
        ]
    return [
        mark,
        f'{region.indent}raise NotImplementedError("Write this part yourself: '
        f'{region.function}, in notebook {notebook}.")',
    ]


def strip_solutions(
    source: str,
    *,
    kind: str,
    notebook: str = "this notebook",
    owner: Callable[[Region], str] | None = None,
    only: Collection[str] | None = None,
    importable: bool = False,
) -> tuple[str, int]:
    """Replace each solution region of one cell's (or file's) source with its stub; return the
    new source and the number of regions stubbed. ``notebook`` names the notebook that writes
    them, or ``owner(region)`` does, region by region; ``only`` stubs just the regions inside
    these functions and leaves the others' solutions in place; ``importable`` stubs a
    module-level region with its stand-in (see the module docstring)."""
    found = {
        region.line: region
        for region in regions(source, where=notebook)
        if only is None or region.function in only
    }
    lines = source.split("\n")
    out: list[str] = []
    inside = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN and number in found:
            inside = True
            region = found[number]
            where = owner(region) if owner is not None else notebook
            if kind == "code":
                out.extend(_code_stub(region, where, importable=importable))
            else:
                out.append(ANSWER_PROMPT)
        elif stripped == END and inside:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out), len(found)


def unwritten(source: str) -> list[Unwritten]:
    """The stubs still in ``source``, in order: what a learner has not written yet."""
    return [Unwritten(m["function"], m["notebook"]) for m in _STUB.finditer(source)]
