"""Import a file from its source, never from a cached ``.pyc``.

Python trusts a ``__pycache__`` entry whose recorded mtime (to the second) and size match the
source's. A ``proxy.py`` edited within a second of its last import, to a body of the same size
(``return 2`` to ``return 7``; the ``%%proxy_part`` magic writes a part and imports the file at
once), would load the old code. Compiling from the source costs a few milliseconds per load.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import CodeType

__all__ = ["source_spec"]


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """A source file loader that compiles the source at every load and writes no bytecode."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def source_spec(name: str, path: Path) -> importlib.machinery.ModuleSpec:
    """The spec of module ``name`` at ``path``, loaded from its source."""
    loader = _SourceOnlyLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot import {path}")
    return spec
