"""Learner copies of the instructor notebooks.

The committed notebooks are the instructor copies: solutions in, outputs executed. A learner copy
replaces every solution region with a stub and clears every output, following the nbgrader
convention for the delimiters::

    ### BEGIN SOLUTION
    ...the instructor's code or answer...
    ### END SOLUTION

In a code cell the region becomes a ``raise NotImplementedError(...)`` at the region's own
indentation, so a stub inside a function body fails only when that function runs, with a message
that says which step to write. In a markdown cell (a verification question's answer) the region
becomes a prompt for the learner's own answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from labkit.errors import LabkitError

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
ANSWER_PROMPT = "_Write your answer here._"

__all__ = ["SolutionRegionError", "StudentCopy", "make_student_copies", "strip_solutions"]


class SolutionRegionError(LabkitError):
    """A notebook's solution delimiters do not pair up."""


@dataclass(frozen=True)
class StudentCopy:
    """One learner notebook written by :func:`make_student_copies`."""

    source: Path
    target: Path
    regions: int


def _code_stub(indent: str, notebook: str) -> str:
    return (
        f"{indent}# YOUR CODE HERE\n"
        f'{indent}raise NotImplementedError("Write this part yourself: see the step above in '
        f'{notebook}.")'
    )


def strip_solutions(source: str, *, kind: str, notebook: str = "this notebook") -> tuple[str, int]:
    """Replace each solution region of one cell's source; return the new source and the count.

    Raises :class:`SolutionRegionError` when a BEGIN has no END, or an END has no BEGIN.
    """
    lines = source.split("\n")
    out: list[str] = []
    regions = 0
    inside = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise SolutionRegionError(
                    f"{notebook}: line {number} opens a solution region inside another one. "
                    f"Close the first with '{END}' before opening the next."
                )
            inside = True
            regions += 1
            indent = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
            out.append(_code_stub(indent, notebook) if kind == "code" else ANSWER_PROMPT)
        elif stripped == END:
            if not inside:
                raise SolutionRegionError(
                    f"{notebook}: line {number} closes a solution region that was never opened. "
                    f"Add '{BEGIN}' above it or delete it."
                )
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise SolutionRegionError(
            f"{notebook}: a solution region is never closed. Add '{END}' after the solution."
        )
    return "\n".join(out), regions


def make_student_copies(source_dir: Path, out_dir: Path) -> list[StudentCopy]:
    """Write a learner copy of every ``*.ipynb`` in *source_dir* into *out_dir*.

    Outputs and execution counts are cleared; files other than notebooks (the nbval sanitize
    file, data) are not copied.
    """
    notebooks = sorted(source_dir.glob("*.ipynb"))
    if not notebooks:
        raise LabkitError(
            f"No notebooks found in {source_dir}: expected files named NN_topic.ipynb. "
            "Pass the folder that holds the instructor notebooks (e.g. notebooks/)."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    copies: list[StudentCopy] = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        total = 0
        for cell in nb.cells:
            cell.source, count = strip_solutions(
                cell.source, kind=cell.cell_type, notebook=path.name
            )
            total += count
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        target = out_dir / path.name
        nbformat.write(nb, target)
        copies.append(StudentCopy(source=path, target=target, regions=total))
    return copies
