"""Run learners' notebook parts headless: the sandboxed child of ``labkit.grading.notebook_grader``.

``python -m labkit.grading.notebook_runner PLAN EVENTS``

``PLAN`` is a JSON object: ``runs``, a list of
:class:`labkit.grading.notebook_parts.NotebookRun` (``notebook`` and its ``cells``, each
``[role, source]``), and ``runners``, how many to run side by side. The runner first imports
what the instructor's cells import (OpenAI's and Anthropic's SDKs, jsonschema, IPython: seconds
of CPU; ``prepare``), then forks ``runners`` children on that one set of imports. A class graded
at once skips even that: its zygote (``labkit.grading.zygote``) has made the imports before it
forks the learner's runner, which calls ``run_plan`` directly. The notebooks wait
in a queue (a pipe holding one byte per notebook), and each child takes the next one when it has
finished its last, so a long notebook does not hold back a fixed share of the others. In a
child, each notebook runs in a fresh namespace of one IPython shell (not a Jupyter kernel: no
ZMQ, no kernel start-up), so ``%magics`` work as they do in JupyterLab. Each verdict a check
cell gives is appended to ``EVENTS-N.jsonl`` (child N) as one JSON line by ``NotebookChecks``
itself (``LABKIT_NOTEBOOK_VERDICTS``); the runner adds ``start`` and ``done`` around each
notebook (the parent times each notebook by them) and a ``cell_error`` for a cell that raised,
which the parent shows when a check gave no verdict. What the cells print goes to
``EVENTS-N.jsonl.log``.

Before the check cells run, ``check_proxy`` (notebook 09's check of ``proxy.py``, beside its own)
is replaced by one that checks nothing: ``labkit grade`` grades ``proxy.py`` already.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from labkit.notebook_checks import VERDICTS_ENV

__all__ = ["main", "prepare", "run_plan", "warm_modules"]


def _event(events: Path, **fields: Any) -> None:
    with events.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"event": fields.pop("event"), "t": time.time(), **fields}) + "\n")


def _graded_elsewhere(*args: object, **kwargs: object) -> list[object]:
    """``check_proxy`` in a graded run: ``proxy.py`` is graded by ``labkit grade`` itself."""
    return []


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _imported(source: str) -> list[str]:
    """The modules a cell imports at its top level (``import a.b``, ``from c import d``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def warm_modules(cells: Iterable[Sequence[str]]) -> list[str]:
    """What the instructor's cells (``[role, source]``, parts left out: the learner's imports
    happen in their own cell) import at their top level, each once, in order."""
    names: dict[str, None] = {}
    for role, source in cells:
        if role != "part":
            names.update(dict.fromkeys(_imported(source)))
    return list(names)


def prepare(modules: Iterable[str]) -> None:
    """Import what every runner needs, once, before the runners fork (or before a zygote forks
    learners' runners: ``labkit.grading.zygote``); then hide it from the collector."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    # jsonschema imports rfc3987_syntax when it is installed (jupyter-events brings it into the
    # lab's environment; the grader's own install has none) only to check the "iri" formats, which
    # no graded cell asks for, and its import builds 38 parsers: a second of CPU per learner.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    import IPython.core.interactiveshell  # noqa: F401  (warm: every runner needs it)

    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    # What the imports made lives as long as the runner: out of the collector's sight, each
    # full collection (IPython's reset makes one per notebook) walks only what the cells made.
    gc.freeze()


def _taken(queue: int, runs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The notebooks this runner takes from ``queue`` (a pipe's read end), one at a time: a read
    of one byte from a pipe is atomic, so no two runners take the same notebook."""
    while index := os.read(queue, 1):
        yield runs[index[0]]


def _run_notebooks(notebooks: Iterable[dict[str, Any]], events: Path) -> None:
    os.environ[VERDICTS_ENV] = str(events)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    with (
        open(f"{events}.log", "a", encoding="utf-8") as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        for run in notebooks:
            notebook = run["notebook"]
            _event(events, event="start", notebook=notebook)
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
                        events,
                        event="cell_error",
                        notebook=notebook,
                        role=role,
                        error=_described(error),
                    )
                log.flush()
            _event(events, event="done", notebook=notebook)


def run_plan(plan: Path, events: Path) -> int:
    """Run the notebooks of ``plan``, writing ``events``: see the module's docstring."""
    loaded: dict[str, Any] = json.loads(plan.read_text(encoding="utf-8"))
    runs: list[dict[str, Any]] = loaded["runs"]
    runners = max(1, min(int(loaded["runners"]), len(runs)))
    prepare(warm_modules(cell for run in runs for cell in run["cells"]))
    if runners == 1:
        _run_notebooks(runs, Path(f"{events}-0.jsonl"))
        return 0
    if len(runs) > 256:
        raise SystemExit(f"a plan holds at most 256 notebooks (one byte each), not {len(runs)}")
    queue, feed = os.pipe()
    os.write(feed, bytes(range(len(runs))))  # far below a pipe's 64 KiB: never blocks
    os.close(feed)  # every runner sees the end of the queue once it is empty
    children = []
    for n in range(runners):
        pid = os.fork()
        if pid == 0:  # the child runs its notebooks and leaves without the parent's cleanup
            code = 1
            try:
                _run_notebooks(_taken(queue, runs), Path(f"{events}-{n}.jsonl"))
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return 0


def main(argv: list[str] | None = None) -> int:
    plan, events = map(Path, (argv or sys.argv[1:])[:2])
    return run_plan(plan, events)


if __name__ == "__main__":
    sys.exit(main())
