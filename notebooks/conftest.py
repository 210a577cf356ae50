"""What an nbval run reports beyond nbval's own verdicts.

* After the run, each notebook's wall time (kernel start included), against the lab's goal. The
  goal (30 s a notebook, ``GOAL_S``) is a budget for CI and for a learner's patience, not a
  test: a machine under load runs slower, so an over-budget notebook is reported, never failed.
  Each line also names the notebook's slowest cell, so that a run over the goal says where the
  time went (notebook 14's first cell once took 24.9 s where it takes 2 s).
* A failed cell shows what it wrote to stderr. nbval says only "Unexpected output fields:
  stderr" when a cell prints there and its committed outputs do not, and notebook 07's check
  cell did that twice without the text being seen (docs/known-limits.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator
from typing import Any

import pytest

STDERR_SECTION = "what the cell wrote to stderr"

GOAL_S = 30.0

_seconds: defaultdict[str, float] = defaultdict(float)
_slowest: dict[str, tuple[float, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path, _, cell = report.nodeid.partition("::")
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration
        if report.duration > _slowest.get(path, (0.0, ""))[0]:
            _slowest[path] = (report.duration, cell)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    terminalreporter.section("notebook wall times")
    for path, seconds in sorted(_seconds.items()):
        over = f"  (over the {GOAL_S:g} s goal)" if seconds > GOAL_S else ""
        slowest, cell = _slowest.get(path, (0.0, "-"))
        terminalreporter.write_line(
            f"{seconds:6.1f} s  {path}  slowest: {cell} {slowest:.1f} s{over}"
        )


def stderr_of(outputs: list[Any] | None) -> str:
    """The text of a cell's stderr stream outputs, as the kernel sent them."""
    return "".join(
        out.get("text", "")
        for out in outputs or []
        if out.get("output_type") == "stream" and out.get("name") == "stderr"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed and (text := stderr_of(getattr(item, "test_outputs", None))):
        report.sections.append((STDERR_SECTION, text))
