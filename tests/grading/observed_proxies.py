"""Proxies built from the reference by small text patches (as ``broken/``) that show a behaviour a
check must *describe*, not only pass or fail: each module in ``observed/`` has a docstring and
``PATCHES`` (``(old, new)``; ``old`` must occur exactly once in the reference).

They are kept out of ``broken/``, whose every file the verdict table grades whole.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from grading_support import REFERENCE

OBSERVED_DIR = Path(__file__).parent / "observed"


def observed_source(name: str) -> str:
    """The reference with ``name``'s patches applied; fails loudly if a patch no longer fits."""
    spec = importlib.util.spec_from_file_location(f"observed_{name}", OBSERVED_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = REFERENCE.read_text(encoding="utf-8")
    for old, new in module.PATCHES:
        found = source.count(old)
        assert found == 1, f"{name}: {old!r} is in the reference {found} times, not once"
        source = source.replace(old, new)
    return source


def write_observed(name: str, folder: Path) -> Path:
    path = folder / f"{name}.py"
    path.write_text(observed_source(name), encoding="utf-8")
    return path
