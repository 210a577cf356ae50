"""``resume_stop`` and ``resume_grace`` judge what they saw, in process: the mock's record of a
resumable answer against the Stop (or the drop), each limit just inside and just outside, an
answer still running, stopped late or stopped on the drop, Stop refused, the usage log's lines,
and every verdict. (The experiments run over real sockets in the grader's mutation table:
``no_stop`` answers Stop and stops nothing; ``cancel_on_drop`` stops the answer when its first
connection goes.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from labkit.checks.cancel import MAX_STOP_S
from labkit.checks.context import Record
from labkit.checks.result import CheckResult
from labkit.checks.resume_cancel import (
    GRACE_S,
    PROBE_S,
    SLACK_S,
    STOP_GRACE_S,
    Dropped,
    Stopped,
    judge_grace,
    judge_stop,
)

AT = 200.5  # when Stop's answer came, or the client dropped
ANSWERED_AFTER = 0.003  # from sending Stop to its answer
LITTLE = 0.01
COMPLETION = "chatcmpl-1"
CANCELLED_LINE = {"id": COMPLETION, "outcome": "cancelled", "prompt_tokens": None}
STOPPED = "Stop cancelled the upstream at once"
NO_STREAM = "the response had no X-Stream-Id header, so there was no stream to stop"
REFUSED = "the proxy did not answer Stop with the stream cancelled"
KEPT = "the upstream kept generating after Stop"
LATE = "the upstream did not stop promptly after Stop"
STOP_USAGE = "the usage log does not have one cancelled line for the stopped answer"
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


def stopped(
    rec: Record | None = None,
    *,
    status: int | None = 200,
    body: Mapping[str, Any] | None = None,
    lines: Lines = (CANCELLED_LINE,),
    stream: str | None = "s-1",
) -> Stopped:
    rec = record() if rec is None else rec
    said = {"id": stream, "object": "stream", "status": "cancelled"} if body is None else body
    answered = None if status is None else AT
    return Stopped(stream, AT - ANSWERED_AFTER, answered, status, said, rec, lines)


def dropped(
    rec: Record | None = None,
    *,
    probe: str | None = "running",
    lines: Lines = (CANCELLED_LINE,),
    stream: str | None = "s-1",
) -> Dropped:
    return Dropped(stream, AT, probe, record(stop_after=5.2) if rec is None else rec, lines)


# resume_stop ---------------------------------------------------------------------------------


def test_a_stop_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    inside = judge_stop(stopped(record(stop_after=MAX_STOP_S - LITTLE)))
    outside = judge_stop(stopped(record(stop_after=MAX_STOP_S + LITTLE)))
    assert (inside.passed, inside.verdict) == (True, STOPPED)
    assert inside.hint == "see 15_resumable_streams"
    assert (outside.passed, outside.verdict) == (False, LATE)
    assert outside.hint.startswith("15_resumable_streams: on POST /v1/streams/{id}/cancel")


def test_a_quick_stop_passes_with_its_evidence() -> None:
    result = judge_stop(stopped())
    assert result.passed
    assert dict(result.evidence) == {
        "stop_status": 200,
        "stop_answered_after_ms": 3,
        "stop_says": "cancelled",
        "upstream_state": "cancelled",
        "upstream_stop_after_stop_ms": 7,
        "tokens_generated": 12,
        "resume_grace_s": STOP_GRACE_S,
        "usage_lines": 1,
        "usage_outcomes": "cancelled",
    }


@pytest.mark.parametrize("state", ["running", "completed"])
def test_a_stop_that_stopped_nothing_fails_as_kept_generating(state: str) -> None:
    result = judge_stop(stopped(record(state, None if state == "running" else 19.9)))
    assert result.verdict == KEPT
    assert result.evidence["upstream_stop_after_stop_ms"] == (None if state == "running" else 19903)


@pytest.mark.parametrize(
    ("status", "body"),
    [(404, {"error": {"message": "no stream"}}), (500, {}), (None, {}), (200, {"ok": True})],
    ids=["not-found", "server-error", "no-answer", "not-cancelled"],
)
def test_stop_not_answered_as_cancelled_fails_even_if_the_upstream_stopped(
    status: int | None, body: Mapping[str, Any]
) -> None:
    result = judge_stop(stopped(status=status, body=body))
    assert result.verdict == REFUSED
    assert result.evidence["stop_status"] == status


@pytest.mark.parametrize(
    "lines",
    [(), (CANCELLED_LINE, CANCELLED_LINE), ({**CANCELLED_LINE, "outcome": "completed"},)],
    ids=["none", "twice", "wrong-outcome"],
)
def test_stop_logged_other_than_once_cancelled_fails(lines: Lines) -> None:
    result = judge_stop(stopped(lines=lines))
    assert result.verdict == STOP_USAGE
    assert result.hint.startswith("15_resumable_streams: log a resumable answer's usage once")


def test_without_a_usage_log_stop_is_judged_on_the_upstream_alone() -> None:
    result = judge_stop(stopped(lines=None))
    assert result.passed
    assert result.evidence["usage_log"] == "not read"


def test_the_clock_starts_at_stop_s_answer_not_at_its_request() -> None:
    """Bug: graded beside another submission on two busy CPUs, a proxy whose Stop works
    (``ids_per_connection``) answered Stop only after the check's 2 s, and failed. Fix: Stop's
    answer is waited for longer, and the upstream has MAX_STOP_S from that answer."""
    slow = Stopped("s-1", AT - 2.4, AT, 200, {"status": "cancelled"}, record(), (CANCELLED_LINE,))
    result = judge_stop(slow)
    assert result.passed
    assert result.evidence["stop_answered_after_ms"] == 2400
    assert result.evidence["upstream_stop_after_stop_ms"] == 2404


def test_no_stream_id_means_no_stream_to_stop() -> None:
    result = judge_stop(stopped(status=None, body={}, stream=None))
    assert result.verdict == NO_STREAM


def test_stop_on_a_request_that_never_reached_the_upstream_fails_at_forwarding() -> None:
    result = judge_stop(Stopped("s-1", AT, AT, 200, {}, None, None))
    assert result.verdict == "the request never reached the upstream"


# resume_grace --------------------------------------------------------------------------------


def test_a_grace_period_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    bound = GRACE_S + SLACK_S
    inside = judge_grace(dropped(record(stop_after=bound - LITTLE)))
    outside = judge_grace(dropped(record(stop_after=bound + LITTLE)))
    assert (inside.passed, inside.verdict) == (True, GRACED)
    assert (outside.passed, outside.verdict) == (False, LATE_GRACE)
    assert outside.hint.startswith("15_resumable_streams: have the producer ask the log")


def test_the_reference_timing_passes_with_its_evidence() -> None:
    result = judge_grace(dropped())
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
    result = judge_grace(dropped(record(stop_after=0.005), probe=probe))
    assert result.verdict == ON_DROP
    assert "only Stop, or nobody reading it for RESUME_GRACE_S" in result.hint


@pytest.mark.parametrize("state", ["running", "completed"])
def test_an_upstream_never_let_go_fails_as_kept_generating(state: str) -> None:
    result = judge_grace(dropped(record(state, None if state == "running" else 80.0)))
    assert result.verdict == KEPT_PAST_GRACE


def test_a_cancel_without_an_end_time_is_not_in_time() -> None:
    assert judge_grace(dropped(record("cancelled", None))).verdict == LATE_GRACE


@pytest.mark.parametrize(
    "lines",
    [(), (CANCELLED_LINE, {**CANCELLED_LINE, "outcome": "completed"})],
    ids=["none", "twice"],
)
def test_an_abandoned_answer_logged_other_than_once_cancelled_fails(lines: Lines) -> None:
    assert judge_grace(dropped(lines=lines)).verdict == GRACE_USAGE


def test_grace_with_no_stream_id_or_no_request_fails_first() -> None:
    assert judge_grace(dropped(stream=None)).verdict == (
        "the response had no X-Stream-Id header, so the stream was not resumable"
    )
    never = judge_grace(Dropped("s-1", AT, None, None, None))
    assert never.verdict == "the request never reached the upstream"


def test_the_allowed_time_is_the_one_observed_for_the_machine() -> None:
    stretched = GRACE_S + 2 * SLACK_S  # half a CPU
    late_here = record(stop_after=GRACE_S + SLACK_S + 1.0)
    result = judge_grace(Dropped("s-1", AT, "running", late_here, (CANCELLED_LINE,), stretched))
    assert result.passed
    assert result.evidence["allowed_after_drop_ms"] == round(stretched * 1000)


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        judge_stop(stopped()),
        judge_stop(stopped(record("running", None))),
        judge_stop(stopped(record(stop_after=3.0))),
        judge_stop(stopped(status=404, body={})),
        judge_stop(stopped(lines=())),
        judge_stop(stopped(stream=None)),
        judge_grace(dropped()),
        judge_grace(dropped(probe="cancelled")),
        judge_grace(dropped(record("running", None))),
        judge_grace(dropped(record(stop_after=9.0))),
        judge_grace(dropped(lines=())),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
