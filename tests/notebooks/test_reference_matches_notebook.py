"""The proxy that notebook 06 writes out is the reference solution, line for line.

Notebook 06 assembles the learner's deliverable from ``%%writefile {PARTS}/N_name.py`` cells and
joins the parts with two blank lines between them. With its solution delimiters and each cell's
magic line removed, that file must be ``labkit/reference/proxy.py`` exactly: the grader's model
answer and the notebook's cannot drift apart. When the reference changes, regenerate the part
cells from it (and re-execute the notebook).
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest

from labkit.student import BEGIN, END, strip_solutions

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "06_midstream_errors.ipynb"
REFERENCE = ROOT / "labkit" / "reference" / "proxy.py"
PART_MAGIC = re.compile(r"^%%writefile \{PARTS\}/(?P<name>\d+_\w+\.py)$")
JOIN = "\n\n\n"  # what the notebook's joining cell puts between parts


def _part_cells() -> list[tuple[str, str]]:
    """(file name, cell body without the magic line) of each part cell, in notebook order."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        first, _, body = cell.source.partition("\n")
        match = PART_MAGIC.match(first.strip())
        if match:
            parts.append((match["name"], body))
    return parts


def _join(bodies: list[str]) -> str:
    return JOIN.join(body.rstrip("\n") for body in bodies) + "\n"


def _without_delimiters(source: str) -> str:
    return "\n".join(line for line in source.split("\n") if line.strip() not in (BEGIN, END))


def test_notebook_writes_the_proxy_in_parts() -> None:
    names = [name for name, _ in _part_cells()]
    assert len(names) >= 2, f"expected %%writefile {{PARTS}}/... cells in {NOTEBOOK.name}"
    # the joining cell takes sorted(PARTS.glob("*.py")): notebook order must be that order
    assert names == sorted(names), f"part cells are out of order: {names}"
    assert len(set(names)) == len(names), f"a part is written twice: {names}"


def test_final_proxy_in_notebook_is_the_reference() -> None:
    written = _join([_without_delimiters(body) for _, body in _part_cells()])
    reference = REFERENCE.read_text(encoding="utf-8")
    if written != reference:
        diff = "".join(
            difflib.unified_diff(
                reference.splitlines(keepends=True),
                written.splitlines(keepends=True),
                fromfile=str(REFERENCE.relative_to(ROOT)),
                tofile=f"{NOTEBOOK.name} (parts joined, solution lines removed)",
            )
        )
        pytest.fail(
            "The proxy in notebook 06 differs from the reference solution. Regenerate the "
            f"notebook's part cells from the reference and re-execute it.\n{diff}"
        )


def test_solution_regions_sit_inside_function_bodies() -> None:
    """A stub at module level would make the learner's proxy.py fail to import."""
    for name, body in _part_cells():
        for number, line in enumerate(body.split("\n"), start=2):
            if line.strip() in (BEGIN, END):
                assert line.startswith(" "), f"{name} line {number}: region at module level"


def test_learner_proxy_still_imports_and_defines_app(tmp_path: Path) -> None:
    bodies = [
        strip_solutions(body, kind="code", notebook=NOTEBOOK.name)[0] for _, body in _part_cells()
    ]
    regions = sum(
        strip_solutions(body, kind="code", notebook=NOTEBOOK.name)[1] for _, body in _part_cells()
    )
    assert regions > 0, "the learner copy of notebook 06 has nothing left to write"
    learner = tmp_path / "learner_proxy.py"
    learner.write_text(_join(bodies), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("learner_proxy", learner)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["learner_proxy"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["learner_proxy"]
    assert hasattr(module, "app")
    assert "NotImplementedError" in learner.read_text(encoding="utf-8")
