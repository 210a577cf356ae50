"""After an nbval run, each notebook's wall time (kernel start included), against the lab's goal.

The goal (30 s a notebook, ``GOAL_S``) is a budget for CI and for a learner's patience, not a
test: a machine under load runs slower, so an over-budget notebook is reported, never failed.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

GOAL_S = 30.0

_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    terminalreporter.section("notebook wall times")
    for path, seconds in sorted(_seconds.items()):
        over = f"  (over the {GOAL_S:g} s goal)" if seconds > GOAL_S else ""
        terminalreporter.write_line(f"{seconds:6.1f} s  {path}{over}")
