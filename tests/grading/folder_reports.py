"""What learner code saw inside its sandbox, read from its own folder while it is graded.

A grading has a network of its own (``labkit.grading.network``) and a sandbox that lets learner
code write only into its own folder, so a spy submission cannot send what it saw to a test over
the machine's loopback. It writes it into its folder instead (``REPORTER``: one JSON file per
process, renamed into place whole), and ``folder_reports`` reads those files from outside while
the grading runs; the grader removes the folder when the grading ends, which takes seconds after
the spy's import-time code has run, against a poll every 20 ms.

The folder lies inside the grading worker's home, which ``labkit.grading.roster`` makes with
``tempfile`` in the caller's temporary folder: ``folder_reports(base, monkeypatch)`` sets that
to ``base`` for the test, in this process and (``TMPDIR``) in a ``labkit grade`` it starts.
"""

from __future__ import annotations

import fnmatch
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["REPORTER", "folder_reports"]

POLL_S = 0.02
PATTERN = "labkit-report-*.json"

# Learner-side: defines _report(seen), which writes ``seen`` into the process's own folder.
REPORTER = """
import json as _rjson, os as _ros


def _report(seen):
    name = "labkit-report-%d.json" % _ros.getpid()
    with open(name + ".part", "w") as out:
        _rjson.dump(seen, out)
    _ros.replace(name + ".part", name)
"""


@contextmanager
def folder_reports(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[dict[str, object]]]:
    """The reports spies write in gradings started (by this process) inside the block, one per
    process that wrote one; complete once the block has ended."""
    base.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    monkeypatch.setenv("TMPDIR", str(base))
    found: dict[Path, dict[str, object]] = {}
    stop = threading.Event()

    def sweep() -> None:
        # os.walk, not rglob: a grading removes its folders while this walks them, and os.walk
        # skips a folder that is gone where rglob raises
        paths = (
            Path(folder, name)
            for folder, _, names in os.walk(base)
            for name in fnmatch.filter(names, PATTERN)
        )
        for path in paths:
            if path in found:
                continue
            try:
                found[path] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # removed with its folder, or not yet readable: seen next time or gone

    def watch() -> None:
        while not stop.wait(POLL_S):
            sweep()

    reports: list[dict[str, object]] = []
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield reports
    finally:
        stop.set()
        thread.join()
        sweep()
        reports.extend(found.values())
