"""The learner bundle's README (``labkit/bundle_files/README.md``, rendered by ``labkit student``):
its table names every notebook the bundle carries, and its Binder badge says what to replace."""

from __future__ import annotations

import re
from pathlib import Path

from labkit.packaging import render
from labkit.student import BINDER_PLACEHOLDER

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_readme_table_has_a_row_for_every_notebook_in_order() -> None:
    readme = render("README.md", BINDER_REPO=BINDER_PLACEHOLDER)
    rows = re.findall(r"^\| (\d\d) \| `(\d\d_\w+)` \|", readme, flags=re.MULTILINE)
    assert [name for _, name in rows] == NOTEBOOKS
    assert all(name.startswith(step) for step, name in rows)


def test_the_badge_placeholder_comes_with_what_to_replace_it_with() -> None:
    readme = render("README.md", BINDER_REPO=BINDER_PLACEHOLDER)
    badge = f"https://mybinder.org/v2/gh/{BINDER_PLACEHOLDER}/HEAD"
    assert badge in readme
    prose = readme.split("## Set up and start", 1)[1].split("##", 1)[0]
    assert f"if it says `{BINDER_PLACEHOLDER}`, replace that" in prose
    given = render("README.md", BINDER_REPO="ada-lovelace/streaming-proxy-lab")
    assert "https://mybinder.org/v2/gh/ada-lovelace/streaming-proxy-lab/HEAD" in given
