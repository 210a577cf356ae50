"""Renderers: the terminal table, Gradescope's results.json, learner feedback, the CSV row."""

from __future__ import annotations

from pathlib import Path

from labkit.checks import CheckResult
from labkit.grading.class_results import summary_chart
from labkit.grading.gradescope import results_for
from labkit.grading.report import (
    SubmissionReport,
    csv_row,
    feedback_markdown,
    render_table,
)
from labkit.grading.rubric import Rubric


def make_report() -> SubmissionReport:
    results = [
        CheckResult("trickle", True, "tokens reach the client", {"first_token_lag_ms": 2}),
        CheckResult(
            "cancel",
            False,
            "the upstream kept generating after the client left",
            {"upstream_state": "running"},
            "04_cancel_on_disconnect: close the upstream response.",
        ),
        CheckResult("usage", False, "skipped: no usage log to read", {}, "grade a file", True),
    ]
    return SubmissionReport("alice", "alice/proxy.py", results, Rubric(max_score=10))


def test_skipped_checks_leave_the_total_out_of_max_score() -> None:
    report = make_report()
    assert (report.score, report.max_score) == (5.0, 10.0)
    assert not report.all_passed


def test_table_shows_verdicts_then_what_was_seen_and_what_to_change() -> None:
    assert render_table(make_report()) == "\n".join(
        [
            "Grading alice",
            "  PASS  trickle                    tokens reach the client",
            "  FAIL  cancel                     the upstream kept generating after the client left",
            "        seen: upstream_state=running",
            "        fix:  04_cancel_on_disconnect: close the upstream response.",
            "  SKIP  usage                      skipped: no usage log to read",
            "Score: 5/10 (1 of 2 checks passed)",
        ]
    )


def test_gradescope_results_have_one_test_per_counted_check() -> None:
    results = results_for(make_report())
    assert results["score"] == 5.0
    assert [t["status"] for t in results["tests"]] == ["passed", "failed"]
    failed = results["tests"][1]
    assert failed["name"] == "cancel: a client disconnect stops the upstream promptly"
    assert (failed["score"], failed["max_score"], failed["visibility"]) == (0.0, 5.0, "visible")
    assert "Observed: upstream_state=running" in failed["output"]
    assert "What to change: 04_cancel_on_disconnect" in failed["output"]


def test_feedback_tells_the_learner_what_was_observed_and_what_to_change() -> None:
    text = feedback_markdown(make_report())
    assert "Score: **5 / 10** (1 of 2 checks passed)." in text
    assert "- **Observed**: upstream_state=running" in text
    assert "- **What to change**: 04_cancel_on_disconnect: close the upstream response." in text
    assert "| usage | skipped | skipped: no usage log to read |" in text


def test_csv_row_and_json_round_trip() -> None:
    report = make_report()
    row = csv_row(report)
    assert (row["learner"], row["score"], row["cancel"], row["usage"]) == (
        "alice",
        "5",
        "failed",
        "skipped",
    )
    again = SubmissionReport.from_json(report.to_json(), report.rubric)
    assert again.to_json() == report.to_json()


def test_the_class_chart_is_a_png_drawn_without_changing_matplotlibs_backend(
    tmp_path: Path,
) -> None:
    """Grading inside a Jupyter kernel must leave its plotting backend alone."""
    import matplotlib

    backend = matplotlib.rcParams["backend"]
    chart = tmp_path / "summary.png"
    summary_chart([make_report(), make_report()], chart)
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert matplotlib.rcParams["backend"] == backend


def test_a_notebook_parts_verdict_is_shown_in_the_same_form_as_a_checks() -> None:
    """The report table, the feedback file and its table: a part's row and its "what to fix"
    section are built as a check's are, named by its notebook."""
    part = CheckResult(
        "nb03.should_compress",
        False,
        "event streams and no-transform responses are left alone",
        {"saw": "should_compress({'content-type': 'text/event-stream'}) -> True, not False"},
        "in notebook 03_gzip_buffering, write should_compress in its build-it cell",
    )
    check = CheckResult("cancel", False, "the upstream went on", {"state": "running"}, "04: close")
    report = SubmissionReport("ana", "ana/proxy.py", [check, part], Rubric())
    table = render_table(report)
    assert "  FAIL  nb03.should_compress " in table and "  FAIL  cancel " in table
    assert "        fix:  in notebook 03_gzip_buffering, write should_compress" in table
    feedback = feedback_markdown(report)
    assert "### nb03.should_compress: written in notebook 03\n" in feedback
    assert "- **What to change**: in notebook 03_gzip_buffering, write should_compress" in feedback
    assert "| nb03.should_compress | failed | event streams and no-transform" in feedback
