"""A warning is a second deterministic line on a result (a passed one too): every report form
shows it under the verdict, and a report read back from JSON keeps it, or has none if it was
written before warnings existed."""

from __future__ import annotations

import pytest

from labkit.checks import CheckResult
from labkit.checks.context import Outcome
from labkit.grading.gradescope import results_for
from labkit.grading.report import (
    SubmissionReport,
    feedback_markdown,
    render_table,
)
from labkit.grading.rubric import Rubric

BATCHED = "tokens arrive in batches: something holds sends back"
PASSED = Outcome("trickle", "02_forwarding_proxy").passed(
    "tokens reach the client", {"client_max_gap_ms": 201}, warning=BATCHED
)
FAILED = CheckResult(
    "cancel", False, "the upstream kept generating", {"upstream_state": "running"}, "close it."
)


def _report() -> SubmissionReport:
    return SubmissionReport("ana", "ana/proxy.py", [PASSED, FAILED], Rubric(max_score=10))


def test_a_passed_result_can_carry_a_warning_and_keeps_its_score() -> None:
    assert PASSED.passed and PASSED.warning == BATCHED
    assert _report().score == 5.0
    assert str(PASSED) == "PASS trickle: tokens reach the client"  # a notebook's line stays one


def test_a_warning_has_no_digits_like_a_verdict() -> None:
    with pytest.raises(AssertionError):
        Outcome("trickle", "02_forwarding_proxy").passed("ok", {}, warning="held for 200 ms")


def test_the_table_shows_the_warning_under_the_verdict_and_what_was_seen() -> None:
    lines = render_table(_report()).splitlines()
    at = lines.index("  PASS  trickle                    tokens reach the client")
    assert lines[at + 1 : at + 3] == [
        f"        warning: {BATCHED}",
        "        seen: client_max_gap_ms=201",
    ]
    assert not any("fix:" in line for line in lines[at : at + 3])  # a pass has nothing to fix


def test_the_feedback_lists_a_passed_check_with_a_warning() -> None:
    text = feedback_markdown(_report())
    section = text.split("## Passed, with a warning\n", 1)[1]
    assert section.startswith("\n### trickle: ")
    assert f"- **Warning**: {BATCHED}\n- **Observed**: client_max_gap_ms=201" in section


def test_gradescope_outputs_show_the_warning_under_the_verdict() -> None:
    [test] = [t for t in results_for(_report())["tests"] if t["name"].startswith("trickle")]
    assert test["status"] == "passed"
    assert test["output"].startswith(f"tokens reach the client\nwarning: {BATCHED}\n")
    assert "Observed: client_max_gap_ms=201" in test["output"]


def test_json_keeps_the_warning_and_reads_reports_written_without_one() -> None:
    report = _report()
    data = report.to_json()
    assert data["checks"]["trickle"]["warning"] == BATCHED
    assert SubmissionReport.from_json(data, report.rubric).result("trickle") == PASSED
    del data["checks"]["trickle"]["warning"], data["checks"]["cancel"]["warning"]
    again = SubmissionReport.from_json(data, report.rubric)
    assert [r.warning for r in again.results] == ["", ""]
    assert again.result("cancel") == FAILED


def test_gradescope_names_an_in_notebook_part_by_its_notebook() -> None:
    part = CheckResult("nb08.adapter", True, "the adapter maps every event", {}, "")
    report = SubmissionReport("ana", "ana", [part], Rubric())
    [test] = results_for(report)["tests"]
    assert test["name"] == "nb08.adapter: written in notebook 08"
