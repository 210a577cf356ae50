"""Broken proxies built from the reference by small text patches, so they cannot drift from it.

Each module in ``broken/`` has a docstring (the bug), ``PATCHES`` (``(old, new)`` or
``(old, new, count)``: ``old`` must occur exactly once, or ``count`` times, in the reference)
and ``FAILS``, the checks that variant must fail (and no others) among the lab's checks, which
the verdict table grades; a variant whose bug only a ``gateway`` check sees names that check
(``log_in_process``: ``resume_replica``), and is graded on it where that check's tests are.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import solutions.proxy
from labkit.checks import CHECK_IDS
from labkit.regions import regions, strip_solutions

REFERENCE = Path(solutions.proxy.__file__)
BROKEN_DIR = Path(__file__).parent / "broken"
VARIANTS = sorted(p.stem for p in BROKEN_DIR.glob("*.py"))


def patch_module(folder: Path, name: str) -> ModuleType:
    """``folder/name.py``, loaded: a module with ``PATCHES`` (and, in ``broken/``, ``FAILS``)."""
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{name}", folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def patched_reference(folder: Path, name: str) -> str:
    """The reference with ``folder/name.py``'s patches applied; fails loudly if a patch no
    longer fits."""
    source = REFERENCE.read_text(encoding="utf-8")
    for patch in patch_module(folder, name).PATCHES:
        old, new, count = (*patch, 1) if len(patch) == 2 else patch
        found = source.count(old)
        assert found == count, f"{name}: {old!r} is in the reference {found} times, not {count}"
        source = source.replace(old, new)
    return source


def variant(name: str) -> ModuleType:
    return patch_module(BROKEN_DIR, name)


def broken_source(name: str) -> str:
    """The reference with ``broken/name.py``'s patches applied."""
    return patched_reference(BROKEN_DIR, name)


def write_variant(name: str, folder: Path) -> Path:
    path = folder / f"{name}.py"
    path.write_text(broken_source(name), encoding="utf-8")
    return path


def expected_failures(name: str) -> set[str]:
    return set(variant(name).FAILS)


def lab_failures(name: str) -> set[str]:
    """The checks of the lab (``CHECK_IDS``, what ``labkit grade`` runs) ``name`` must fail."""
    return expected_failures(name) & set(CHECK_IDS)


#: The broken proxies the lab's checks catch; the others fail only a ``gateway`` check.
LAB_VARIANTS = [name for name in VARIANTS if lab_failures(name)]


def stubbed_one_region(function: str) -> str:
    """The reference with only ``function``'s solution region stubbed as the learner bundle
    stubs it (its stand-in, or a ``raise``), the stub's marker comment taken out so that the
    grader runs the stub instead of reporting the part as not written."""
    source = REFERENCE.read_text(encoding="utf-8")
    stubbed, _ = strip_solutions(source, kind="code", only={function})
    return "\n".join(line for line in stubbed.split("\n") if "# YOUR CODE HERE:" not in line)


def region_functions() -> list[str]:
    return [r.function for r in regions(REFERENCE.read_text(encoding="utf-8"))]
