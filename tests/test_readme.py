"""The README stays short and true: its claims that can drift are checked against the
repository, and the module layout it points to (docs/architecture.md) names every module."""

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


MAX_README_BYTES = 12 * 1024
FIRST_SCREEN_LINES = 40


def test_readme_shows_the_two_commands_on_its_first_screen() -> None:
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN_LINES])
    assert "make lab" in first_screen
    assert "make test" in first_screen
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_is_short_and_logs_no_measurement_dates() -> None:
    readme = (ROOT / "README.md").read_text()
    size = len(readme.encode())
    assert size <= MAX_README_BYTES, (
        f"README.md is {size} bytes: keep it under {MAX_README_BYTES} (what the lab is, the two "
        "commands, the learner and instructor paths, links); move detail to docs/"
    )
    dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", readme)
    assert not dates, f"README.md logs dated runs {dates}: measurements go to docs/measurements.md"


def _layout_block() -> str:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    section = architecture.split("## Repository layout", 1)[1]
    return section.split("```", 2)[1]


def test_readme_layout_names_only_files_that_exist() -> None:
    missing = []
    top = ROOT
    for line in _layout_block().splitlines():
        folder = re.match(r"^([\w.]+)/", line)
        if folder:
            top = ROOT / folder.group(1)
            assert top.is_dir(), (
                f"docs/architecture.md's layout names {folder.group(1)}/, which is not here"
            )
        for name in re.findall(r"\b([\w]+\.py)\b", line):
            if not any(top.rglob(name)):
                missing.append(f"{top.name}/.../{name}")
    assert not missing, f"docs/architecture.md's layout names modules that do not exist: {missing}"


def test_readme_layout_lists_every_module_of_labkit_solutions_and_bench() -> None:
    listed = set(re.findall(r"\b(\w+\.py)\b", _layout_block()))
    unlisted = [
        f"{path.parent.name}/{path.name}"
        for folder in ("labkit", "solutions", "bench")
        for path in sorted((ROOT / folder).glob("*.py"))
        if path.name not in listed and path.name not in ("__init__.py", "__main__.py")
    ]
    assert not unlisted, (
        f"add these to docs/architecture.md's layout, with what each is for: {unlisted}"
    )
