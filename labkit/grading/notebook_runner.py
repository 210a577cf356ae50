"""Run learners' notebook parts headless: the sandboxed child of ``labkit.grading.notebook_grader``.

``python -m labkit.grading.notebook_runner RUNS EVENTS``

``RUNS`` is a JSON list of :class:`labkit.grading.notebook_parts.NotebookRun` (``notebook`` and
its ``cells``, each ``[role, source]``). Each notebook runs in a fresh namespace of one IPython
shell (not a Jupyter kernel: no ZMQ, no kernel start-up), so ``%magics`` work as they do in
JupyterLab. Each verdict a check cell gives is appended to ``EVENTS`` as one JSON line by
``NotebookChecks`` itself (``LABKIT_NOTEBOOK_VERDICTS``); this module adds ``start`` and
``done`` around each notebook (the parent times each notebook by them) and a ``cell_error``
for a cell that raised, which the parent shows when a check gave no verdict. What the cells
print goes to ``EVENTS`` + ``.log``.

Before the check cells run, ``check_proxy`` (notebook 09's check of ``proxy.py``, beside its own)
is replaced by one that checks nothing: ``labkit grade`` grades ``proxy.py`` already.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _event(events: Path, **fields: Any) -> None:
    with events.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"event": fields.pop("event"), "t": time.time(), **fields}) + "\n")


def _graded_elsewhere(*args: object, **kwargs: object) -> list[object]:
    """``check_proxy`` in a graded run: ``proxy.py`` is graded by ``labkit grade`` itself."""
    return []


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def main(argv: list[str] | None = None) -> int:
    runs_path, events_path = map(Path, (argv or sys.argv[1:])[:2])
    runs = json.loads(runs_path.read_text(encoding="utf-8"))
    os.environ["LABKIT_NOTEBOOK_VERDICTS"] = str(events_path)
    os.environ.setdefault("MPLBACKEND", "Agg")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    with (
        open(f"{events_path}.log", "a", encoding="utf-8") as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        for run in runs:
            notebook = run["notebook"]
            _event(events_path, event="start", notebook=notebook)
            shell.reset(new_session=False)  # type: ignore[no-untyped-call]
            for role, source in run["cells"]:
                if role == "check":
                    shell.user_ns["check_proxy"] = _graded_elsewhere
                print(f"--- {notebook}: {role} cell", flush=True)
                result = shell.run_cell(  # type: ignore[no-untyped-call]
                    source, store_history=False, silent=True
                )
                error = result.error_before_exec or result.error_in_exec
                if error is not None:
                    _event(
                        events_path,
                        event="cell_error",
                        notebook=notebook,
                        role=role,
                        error=_described(error),
                    )
                log.flush()
            _event(events_path, event="done", notebook=notebook)
    return 0


if __name__ == "__main__":
    sys.exit(main())
