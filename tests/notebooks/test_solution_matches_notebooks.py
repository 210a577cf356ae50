"""One source of truth: ``solutions/proxy.py`` is what the notebooks' build-it cells write.

Each notebook's ``%%proxy_part`` cells hold whole functions of the learner's ``proxy.py``.
Written into ``solutions/proxy.py`` they must change nothing, each function with a solution
region must be written by exactly one notebook (the one its ``# NN ·`` section names), and the
learner copies of the same cells must fit the learner bundle's stubbed ``proxy.py`` exactly.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from labkit.proxy_file import write_part
from labkit.regions import regions, strip_solutions
from labkit.student import part_cells, part_owners, stub_proxy

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
SOLUTION = ROOT / "solutions" / "proxy.py"
SECTION = re.compile(r"^# (\d\d) · ", re.MULTILINE)


def _parts() -> list[tuple[str, str]]:
    return [
        (path.stem, body)
        for path in NOTEBOOKS
        for body in part_cells(nbformat.read(path, as_version=4))
    ]


def test_every_part_cell_is_the_solution_word_for_word(tmp_path: Path) -> None:
    copy = tmp_path / "proxy.py"
    shutil.copyfile(SOLUTION, copy)
    for notebook, body in _parts():
        write_part(body, copy)
        if copy.read_text() != SOLUTION.read_text():
            changed = [
                f"  {a!r}\n  {b!r}"
                for a, b in zip(
                    SOLUTION.read_text().split("\n"), copy.read_text().split("\n"), strict=False
                )
                if a != b
            ][:3]
            pytest.fail(
                f"{notebook}: a %%proxy_part cell differs from solutions/proxy.py. Make the "
                "cell and the file the same, then re-execute the notebook.\n" + "\n".join(changed)
            )


def test_every_region_is_written_by_exactly_one_notebook_its_section_names() -> None:
    owners = part_owners(NOTEBOOK_DIR)  # raises if two notebooks write one function
    source = SOLUTION.read_text()
    sections = [(m.start(), m.group(1)) for m in SECTION.finditer(source)]
    offsets = [0]
    for line in source.split("\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    for region in regions(source):
        assert region.function in owners, f"no notebook writes {region.function}"
        step = [s for start, s in sections if start < offsets[region.line - 1]][-1]
        assert owners[region.function].startswith(step), (
            f"{region.function} is under section {step} but written by {owners[region.function]}"
        )


def test_the_learner_cells_fit_the_learner_proxy_exactly(tmp_path: Path) -> None:
    bundle = tmp_path / "proxy.py"
    bundle.write_text(stub_proxy(SOLUTION.read_text(), NOTEBOOK_DIR)[0])
    before = bundle.read_text()
    for notebook, body in _parts():
        stubbed, _ = strip_solutions(body, kind="code", notebook=notebook)
        write_part(stubbed, bundle)
        assert bundle.read_text() == before, f"{notebook}: its learner cell changes proxy.py"


def test_solution_regions_sit_inside_function_bodies() -> None:
    """A stub at module level would make the learner's proxy.py fail to import."""
    for region in regions(SOLUTION.read_text()):
        assert region.indent, f"line {region.line}: a region at module level"
