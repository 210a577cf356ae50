"""The README's claims that can drift are checked against the repository."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
IGNORE = "# NBVAL_IGNORE_OUTPUT"


def test_readme_counts_the_cells_nbval_compares() -> None:
    total = ignored = 0
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                total += 1
                ignored += IGNORE in cell.source.splitlines()
    readme = (ROOT / "README.md").read_text()
    stated = re.search(
        r"It compares (\d+) of the (\d+) code cells\s+\([\d.]+ %\); the other (\d+)", readme
    )
    assert stated, "README.md should say how many code cells nbval compares"
    assert tuple(map(int, stated.groups())) == (total - ignored, total, ignored), (
        f"README.md says {stated.group(0)!r}, but the notebooks have {total} code cells of "
        f"which {ignored} are marked {IGNORE}: update the README."
    )


def test_readme_shows_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
