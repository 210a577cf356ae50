"""What a server's child process tells its parent about its start: one typed status in a file.

The child (``labkit.servers._child``) writes exactly one :class:`ChildStatus` to the ready file the
parent named, whole and then renamed into place, so the parent never reads half of one. Its
``kind`` says how the start went, as precisely as the child knows it: a target that could not be
loaded says how (a :data:`~labkit.errors.LoadFailure`: ``syntax_error``, ``import_error``,
``no_app``, ``load_error``). The parent (``labkit.servers._subprocess``) turns every kind but
``ready`` into the matching error class of ``labkit.errors``, the kind itself carried as data, so
nothing downstream reads the wording of ``error``. Each of those kinds is a
:data:`~labkit.errors.ProblemKind`, the kind of the error the parent raises (a load failure's:
``TargetLoadError.reason``), so the report of a learner's proxy that did not start names it as
the child did.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, get_args

from labkit.errors import LoadFailure

__all__ = ["LOAD_FAILURES", "ChildStatus", "Kind"]

Kind = Literal["ready", LoadFailure, "port_in_use", "start_failed", "startup_failed"]
KINDS: frozenset[str] = frozenset(get_args(Kind))
#: the kinds that say a target could not be loaded (each becomes a ``TargetLoadError``)
LOAD_FAILURES: frozenset[LoadFailure] = frozenset(get_args(LoadFailure))


@dataclass(frozen=True)
class ChildStatus:
    """``ready`` (with ``port`` and ``pid``), or why the child could not get that far."""

    kind: Kind
    port: int = 0
    pid: int = 0
    error: str = ""  # one line, e.g. "SyntaxError: invalid syntax (proxy.py, line 3)"
    exception: str = ""  # the class name of what loading the target raised, for a person
    details: str = ""  # the traceback, when there is one

    def write(self, path: str | os.PathLike[str]) -> None:
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> ChildStatus | None:
        """The status in ``path``, None while the child has not written one. Raises
        ``ValueError`` for a file that is not a status (another program wrote it)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            raise ValueError(f"not a child status: {data!r}")
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**fields)
