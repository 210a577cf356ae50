"""Which solution lines would reach a learner: the answer key must not ship in the bundle.

A solution line is a line of 30 or more characters (stripped) inside a solution region of an
instructor notebook or of ``solutions/proxy.py`` (stand-in lines excluded: those are the
learner's starting point). ``leaks(texts)`` lists the solution lines found in given text.

Run it as a script to check the current notebooks without building a bundle:
``python tests/notebooks/bundle_leaks.py`` prints each leaking line and where it is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from labkit.regions import regions, strip_solutions  # noqa: E402

MIN_CHARS = 30
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTION = ROOT / "solutions" / "proxy.py"


def solution_lines() -> set[str]:
    sources = [SOLUTION.read_text(encoding="utf-8")]
    for path in NOTEBOOKS:
        sources += [cell.source for cell in nbformat.read(path, as_version=4).cells]
    found: set[str] = set()
    for source in sources:
        for region in regions(source):
            found |= {line.strip() for line in region.solution if len(line.strip()) >= MIN_CHARS}
    return found


def leaks(texts: Mapping[str, str], secret: Iterable[str] | None = None) -> list[str]:
    """``where: line`` for every solution line that appears in one of ``texts``."""
    wanted = set(solution_lines() if secret is None else secret)
    found = []
    for where, text in texts.items():
        for line in text.split("\n"):
            if line.strip() in wanted:
                found.append(f"{where}: {line.strip()}")
    return found


def given_texts() -> dict[str, str]:
    """What a learner gets, without building a bundle: stubbed notebooks, the stubbed proxy,
    and the packages' sources."""
    texts: dict[str, str] = {}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for number, cell in enumerate(nb.cells):
            stubbed, _ = strip_solutions(cell.source, kind=cell.cell_type, notebook=path.stem)
            texts[f"{path.name} cell {number}"] = stubbed
    texts["proxy.py"] = strip_solutions(SOLUTION.read_text(encoding="utf-8"), kind="code")[0]
    for package in ("labkit", "mock_upstream"):
        for source in sorted((ROOT / package).rglob("*")):
            if source.is_file() and source.suffix in {".py", ".md", ".toml", ".in", ".yml", ""}:
                texts[str(source.relative_to(ROOT))] = source.read_text(encoding="utf-8")
    return texts


if __name__ == "__main__":
    found = leaks(given_texts())
    print("\n".join(found) or "no solution line leaks")
    sys.exit(1 if found else 0)
