"""Proxies built from the reference by small text patches (as ``broken/``) that are not broken:
each shows a behaviour a check must *describe*, not only pass or fail, or is a change that must
keep full marks. Each module in ``observed/`` has a docstring and ``PATCHES`` (``(old, new)``;
``old`` must occur exactly once in the reference).

They are kept out of ``broken/``, whose every file the verdict table grades whole.
"""

from __future__ import annotations

from pathlib import Path

from grading_support import patched_reference

OBSERVED_DIR = Path(__file__).parent / "observed"


def observed_source(name: str) -> str:
    """The reference with ``observed/name.py``'s patches applied."""
    return patched_reference(OBSERVED_DIR, name)


def write_observed(name: str, folder: Path) -> Path:
    path = folder / f"{name}.py"
    path.write_text(observed_source(name), encoding="utf-8")
    return path
