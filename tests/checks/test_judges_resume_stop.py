"""``resume_stop`` judges what it saw, in process: the mock's record of a resumable answer
against the Stop, each limit just inside and just outside, an answer still running or stopped
late, Stop refused, the usage log's lines, and every verdict. (The experiment runs over real
sockets in the grader's mutation table: ``no_stop`` answers Stop and stops nothing.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from labkit.checks import resume_stop
from labkit.checks._hang_up import MAX_STOP_S
from labkit.checks.context import Record
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.resume_stop import GRACE_S as STOP_GRACE_S
from labkit.checks.resume_stop import Stopped

ONE_CPU = Budget(cpus=1.0)

AT = 200.5  # when Stop's answer came
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


# resume_stop ---------------------------------------------------------------------------------


def test_a_stop_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    inside = resume_stop.judge(stopped(record(stop_after=MAX_STOP_S - LITTLE)), ONE_CPU)
    outside = resume_stop.judge(stopped(record(stop_after=MAX_STOP_S + LITTLE)), ONE_CPU)
    assert (inside.passed, inside.verdict) == (True, STOPPED)
    assert inside.hint == "see 15_resumable_streams"
    assert (outside.passed, outside.verdict) == (False, LATE)
    assert outside.hint.startswith("15_resumable_streams: on POST /v1/streams/{id}/cancel")


def test_a_quick_stop_passes_with_its_evidence() -> None:
    result = resume_stop.judge(stopped(), ONE_CPU)
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
    result = resume_stop.judge(
        stopped(record(state, None if state == "running" else 19.9)), ONE_CPU
    )
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
    result = resume_stop.judge(stopped(status=status, body=body), ONE_CPU)
    assert result.verdict == REFUSED
    assert result.evidence["stop_status"] == status


@pytest.mark.parametrize(
    "lines",
    [(), (CANCELLED_LINE, CANCELLED_LINE), ({**CANCELLED_LINE, "outcome": "completed"},)],
    ids=["none", "twice", "wrong-outcome"],
)
def test_stop_logged_other_than_once_cancelled_fails(lines: Lines) -> None:
    result = resume_stop.judge(stopped(lines=lines), ONE_CPU)
    assert result.verdict == STOP_USAGE
    assert result.hint.startswith("15_resumable_streams: log a resumable answer's usage once")


def test_without_a_usage_log_stop_is_judged_on_the_upstream_alone() -> None:
    result = resume_stop.judge(stopped(lines=None), ONE_CPU)
    assert result.passed
    assert result.evidence["usage_log"] == "not read"


def test_the_clock_starts_at_stop_s_answer_not_at_its_request() -> None:
    """Bug: graded beside another submission on two busy CPUs, a proxy whose Stop works
    (``ids_per_connection``) answered Stop only after the check's 2 s, and failed. Fix: Stop's
    answer is waited for longer, and the upstream has MAX_STOP_S from that answer."""
    slow = Stopped("s-1", AT - 2.4, AT, 200, {"status": "cancelled"}, record(), (CANCELLED_LINE,))
    result = resume_stop.judge(slow, ONE_CPU)
    assert result.passed
    assert result.evidence["stop_answered_after_ms"] == 2400
    assert result.evidence["upstream_stop_after_stop_ms"] == 2404


def test_no_stream_id_means_no_stream_to_stop() -> None:
    result = resume_stop.judge(stopped(status=None, body={}, stream=None), ONE_CPU)
    assert result.verdict == NO_STREAM


def test_stop_on_a_request_that_never_reached_the_upstream_fails_at_forwarding() -> None:
    result = resume_stop.judge(Stopped("s-1", AT, AT, 200, {}, None, None), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        resume_stop.judge(stopped(), ONE_CPU),
        resume_stop.judge(stopped(record("running", None)), ONE_CPU),
        resume_stop.judge(stopped(record(stop_after=3.0)), ONE_CPU),
        resume_stop.judge(stopped(status=404, body={}), ONE_CPU),
        resume_stop.judge(stopped(lines=()), ONE_CPU),
        resume_stop.judge(stopped(stream=None), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
