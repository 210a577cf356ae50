"""``resume_grace`` judges what it saw, in process: the mock's record of a resumable answer
against the drop, each limit just inside and just outside, an answer stopped on the drop or never
let go, the usage log's lines, the allowed time stretched for the machine, and every verdict.
(The experiment runs over real sockets in the grader's mutation table: ``cancel_on_drop`` stops
the answer when its first connection goes.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from labkit.checks import resume_grace
from labkit.checks.context import Record
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.resume_grace import GRACE_S, PROBE_S, SLACK_S, Dropped

ONE_CPU = Budget(cpus=1.0)

AT = 200.5  # when the client dropped
LITTLE = 0.01
COMPLETION = "chatcmpl-1"
CANCELLED_LINE = {"id": COMPLETION, "outcome": "cancelled", "prompt_tokens": None}
GRACED = "a drop left the upstream generating, and the grace period with nobody back stopped it"
ON_DROP = "the upstream stopped when the client dropped: a drop is not a Stop"
KEPT_PAST_GRACE = "the upstream kept generating after the grace period with nobody reading"
LATE_GRACE = "the upstream was not stopped promptly when the grace period ended"
GRACE_USAGE = "the usage log does not have one cancelled line for the abandoned answer"
Lines = tuple[Mapping[str, Any], ...] | None


def record(state: str = "cancelled", stop_after: float | None = 0.004) -> Record:
    return {
        "id": COMPLETION,
        "state": state,
        "scenario": {"ttft_ms": 100, "tps": 20, "tokens": 400, "seed": 7511},
        "tokens_generated": 12,
        "ended_at": None if stop_after is None else AT + stop_after,
    }


def dropped(
    rec: Record | None = None,
    *,
    probe: str | None = "running",
    lines: Lines = (CANCELLED_LINE,),
    stream: str | None = "s-1",
) -> Dropped:
    return Dropped(stream, AT, probe, record(stop_after=5.2) if rec is None else rec, lines)


# resume_grace --------------------------------------------------------------------------------


def test_a_grace_period_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    bound = GRACE_S + SLACK_S
    inside = resume_grace.judge(dropped(record(stop_after=bound - LITTLE)), ONE_CPU)
    outside = resume_grace.judge(dropped(record(stop_after=bound + LITTLE)), ONE_CPU)
    assert (inside.passed, inside.verdict) == (True, GRACED)
    assert (outside.passed, outside.verdict) == (False, LATE_GRACE)
    assert outside.hint.startswith("15_resumable_streams: have the producer ask the log")


def test_the_reference_timing_passes_with_its_evidence() -> None:
    result = resume_grace.judge(dropped(), ONE_CPU)
    assert result.passed
    assert dict(result.evidence) == {
        "upstream_state_at_probe": "running",
        "probe_after_drop_ms": round(PROBE_S * 1000),
        "upstream_state": "cancelled",
        "upstream_stop_after_drop_ms": 5200,
        "allowed_after_drop_ms": round((GRACE_S + SLACK_S) * 1000),
        "resume_grace_s": GRACE_S,
        "tokens_generated": 12,
        "usage_lines": 1,
        "usage_outcomes": "cancelled",
    }


@pytest.mark.parametrize("probe", ["cancelled", None])
def test_an_upstream_stopped_by_the_drop_fails_as_a_drop_is_not_a_stop(probe: str | None) -> None:
    result = resume_grace.judge(dropped(record(stop_after=0.005), probe=probe), ONE_CPU)
    assert result.verdict == ON_DROP
    assert "only Stop, or nobody reading it for RESUME_GRACE_S" in result.hint


@pytest.mark.parametrize("state", ["running", "completed"])
def test_an_upstream_never_let_go_fails_as_kept_generating(state: str) -> None:
    result = resume_grace.judge(
        dropped(record(state, None if state == "running" else 80.0)), ONE_CPU
    )
    assert result.verdict == KEPT_PAST_GRACE


def test_a_cancel_without_an_end_time_is_not_in_time() -> None:
    assert resume_grace.judge(dropped(record("cancelled", None)), ONE_CPU).verdict == LATE_GRACE


@pytest.mark.parametrize(
    "lines",
    [(), (CANCELLED_LINE, {**CANCELLED_LINE, "outcome": "completed"})],
    ids=["none", "twice"],
)
def test_an_abandoned_answer_logged_other_than_once_cancelled_fails(lines: Lines) -> None:
    assert resume_grace.judge(dropped(lines=lines), ONE_CPU).verdict == GRACE_USAGE


def test_grace_with_no_stream_id_or_no_request_fails_first() -> None:
    assert resume_grace.judge(dropped(stream=None), ONE_CPU).verdict == (
        "the response had no X-Stream-Id header, so the stream was not resumable"
    )
    never = resume_grace.judge(Dropped("s-1", AT, None, None, None), ONE_CPU)
    assert never.verdict == "the request never reached the upstream"


def test_the_allowed_time_is_the_one_observed_for_the_machine() -> None:
    stretched = GRACE_S + 2 * SLACK_S  # half a CPU
    late_here = record(stop_after=GRACE_S + SLACK_S + 1.0)
    result = resume_grace.judge(
        Dropped("s-1", AT, "running", late_here, (CANCELLED_LINE,), stretched), ONE_CPU
    )
    assert result.passed
    assert result.evidence["allowed_after_drop_ms"] == round(stretched * 1000)


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        resume_grace.judge(dropped(), ONE_CPU),
        resume_grace.judge(dropped(probe="cancelled"), ONE_CPU),
        resume_grace.judge(dropped(record("running", None)), ONE_CPU),
        resume_grace.judge(dropped(record(stop_after=9.0)), ONE_CPU),
        resume_grace.judge(dropped(lines=()), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
