"""Run a file as a module from its source, never from a cached ``.pyc``.

Python trusts a ``__pycache__`` entry whose recorded mtime (to the second) and size match the
source's. A ``proxy.py`` edited within a second of its last import, to a body of the same size
(``return 2`` to ``return 7``; the ``%%proxy_part`` magic writes a part and imports the file at
once), would load the old code. Compiling from the source costs a few milliseconds per load.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import CodeType, ModuleType

__all__ = ["run_source"]


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """A source file loader that compiles the source at every load and writes no bytecode."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def run_source(name: str, path: Path) -> ModuleType:
    """A new module ``name``, made by running ``path``'s source. It is put in ``sys.modules``
    before it runs (a dataclass looks its module up there while the file runs), and left there."""
    loader = _SourceOnlyLoader(name, str(path))
    spec = importlib.machinery.ModuleSpec(name, loader, origin=str(path))
    spec.has_location = True  # the module's __file__ is the path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
