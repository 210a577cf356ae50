"""``resume_replica`` judges what it saw, in process: a stream asked of replica A and resumed on
B (``resume``'s observation), and an answer asked of A and stopped on B (``resume_stop``'s).
At its boundaries: B refusing the resume or the Stop (a log in each process), B resuming with
events lost, the Stop's bound just inside and just outside, the usage log's lines (two replicas,
one log; none by URL), a request that never reached the upstream, and every verdict. Without a
second replica the check is skipped, saying it needs ``--replica``. (The experiment runs over
real sockets in tests/grading/test_resume_replica.py, against two references and two
``log_in_process`` mutants.)"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from labkit.checks._hang_up import MAX_STOP_S
from labkit.checks.context import CheckContext, Record
from labkit.checks.machine import Budget
from labkit.checks.resume import Leg, Observed
from labkit.checks.resume_replica import (
    NO_REPLICA,
    PASSED,
    Replicated,
    judge,
    observe,
)
from labkit.checks.resume_stop import Stopped

ONE_CPU = Budget(cpus=1.0)

SENT = tuple(f" word{i}" for i in range(12))
STREAM = "s-1"
AT = 300.5  # when B answered Stop
ANSWERED_AFTER = 0.003
LITTLE = 0.01
COMPLETION = "chatcmpl-7"
CANCELLED_LINE = {"id": COMPLETION, "outcome": "cancelled", "prompt_tokens": None}
NOT_SHARED = (
    "the other replica could not resume the stream: the replicas do not share the replay log"
)
STOP_NOT_SHARED = (
    "the other replica refused Stop: the replicas do not share the replay log, so nothing "
    "reached the replica that runs the answer"
)
SHARED_ADVICE = (
    "15_resumable_streams: with REDIS_URL set keep the replay log in Redis (make_log's "
    "RedisLog), never in the process: every replica then reads every answer's events and takes "
    "its Stop."
)
Lines = tuple[Mapping[str, Any], ...] | None


def legs_cut_at(cut: int, *, resumed_status: int | None = 200) -> tuple[Leg, ...]:
    """A's connection (events 1..cut, dropped), then B's (the rest, to ``[DONE]``); a B that
    refuses the resume sends nothing."""
    first = Leg(200, tuple(str(n) for n in range(1, cut + 1)), SENT[:cut], "disconnected")
    if resumed_status != 200:
        return first, Leg(resumed_status, (), (), "truncated")
    rest = tuple(str(n) for n in range(cut + 1, len(SENT) + 1))
    return first, Leg(200, rest, SENT[cut:], "done")


def resumed(
    legs: tuple[Leg, ...] | None = None,
    *,
    sent: tuple[str, ...] | None = SENT,
    stream: str | None = STREAM,
) -> Observed:
    return Observed(stream, legs_cut_at(5) if legs is None else legs, sent, drops=1)


def record(state: str = "cancelled", stop_after: float | None = 0.004) -> Record:
    return {
        "id": COMPLETION,
        "state": state,
        "scenario": {"ttft_ms": 100, "tps": 20, "tokens": 400, "seed": 7532},
        "tokens_generated": 9,
        "ended_at": None if stop_after is None else AT + stop_after,
    }


def stopped(
    rec: Record | None = None,
    *,
    status: int | None = 200,
    lines: Lines = (CANCELLED_LINE,),
    stream: str | None = STREAM,
    reached: bool = True,
) -> Stopped:
    body = {"id": stream, "object": "stream", "status": "cancelled"} if status == 200 else {}
    answered = None if status is None else AT
    rec = (record() if rec is None else rec) if reached else None
    return Stopped(stream, AT - ANSWERED_AFTER, answered, status, body, rec, lines, None)


def seen(observed: Observed | None = None, stop: Stopped | None = None) -> Replicated:
    return Replicated(
        resumed() if observed is None else observed, stopped() if stop is None else stop
    )


def test_resumed_and_stopped_on_the_other_replica_passes_with_both_experiments_evidence() -> None:
    result = judge(seen(), ONE_CPU)
    assert (result.id, result.passed, result.verdict) == ("resume_replica", True, PASSED)
    assert result.hint == "see 15_resumable_streams"
    assert dict(result.evidence) == {
        "stream_id_header": True,
        "connections": 2,
        "resumes_planned": 1,
        "resume_statuses": "200",
        "events_without_id": 0,
        "ids": "1-5,6-12",
        "terminal": "done",
        "upstream_events": 12,
        "client_events": 12,
        "events_lost": 0,
        "events_extra": 0,
        "events_moved": 0,
        "first_difference_at_event": None,
        "stop_status": 200,
        "stop_answered_after_ms": 3,
        "stop_says": "cancelled",
        "upstream_state": "cancelled",
        "upstream_stop_after_stop_ms": 7,
        "tokens_generated": 9,  # the grace period is the replicas' own: not in the evidence
        "usage_lines": 1,
        "usage_outcomes": "cancelled",
    }


@pytest.mark.parametrize("status", [404, 503, None], ids=["not-found", "no-log", "no-answer"])
def test_a_replica_that_refuses_the_resume_fails_as_not_sharing_the_log(status: int | None) -> None:
    result = judge(
        seen(resumed(legs_cut_at(5, resumed_status=status)), stopped(status=404)), ONE_CPU
    )
    assert (result.id, result.verdict, result.hint) == ("resume_replica", NOT_SHARED, SHARED_ADVICE)
    assert result.evidence["resume_statuses"] == str(status)
    assert result.evidence["stop_status"] == 404  # both experiments' evidence, whichever fails


@pytest.mark.parametrize("status", [404, 500])
def test_a_replica_that_resumes_but_refuses_stop_fails_as_not_sharing_the_log(status: int) -> None:
    result = judge(seen(stop=stopped(status=status)), ONE_CPU)
    assert (result.verdict, result.hint) == (STOP_NOT_SHARED, SHARED_ADVICE)
    assert result.evidence["stop_status"] == status


def test_a_stop_the_other_replica_answers_just_inside_the_limit_passes_just_outside_fails() -> None:
    inside = judge(seen(stop=stopped(record(stop_after=MAX_STOP_S - LITTLE))), ONE_CPU)
    outside = judge(seen(stop=stopped(record(stop_after=MAX_STOP_S + LITTLE))), ONE_CPU)
    assert (inside.passed, inside.verdict) == (True, PASSED)
    assert (outside.id, outside.passed) == ("resume_replica", False)
    assert outside.verdict == "the upstream did not stop promptly after Stop"
    assert outside.hint.startswith("15_resumable_streams: on POST /v1/streams/{id}/cancel")


def test_a_stop_answered_cancelled_that_stops_nothing_fails_as_resume_stop_does() -> None:
    result = judge(seen(stop=stopped(record("running", None))), ONE_CPU)
    assert (result.id, result.verdict) == (
        "resume_replica",
        "the upstream kept generating after Stop",
    )
    assert result.evidence["events_lost"] == 0  # the resume's evidence rides along


def numbered(texts: tuple[str, ...], first: int, terminal: str = "done") -> Leg:
    return Leg(200, tuple(str(n) for n in range(first, first + len(texts))), texts, terminal)


@pytest.mark.parametrize(
    ("from_b", "verdict"),
    [
        (SENT[6:], "the resumed stream lost events the upstream sent"),
        (SENT[4:], "the resumed stream repeated events the client already had"),
    ],
    ids=["lost", "repeated"],
)
def test_a_resume_on_the_other_replica_that_loses_or_repeats_fails_with_resume_s_verdict(
    from_b: tuple[str, ...], verdict: str
) -> None:
    first = numbered(SENT[:5], 1, "disconnected")
    result = judge(seen(resumed((first, numbered(from_b, 6)))), ONE_CPU)
    assert (result.id, result.verdict) == ("resume_replica", verdict)
    assert result.hint.startswith("15_resumable_streams: ")
    assert result.evidence["stop_status"] == 200  # the Stop's evidence rides along


@pytest.mark.parametrize(
    "lines",
    [(), (CANCELLED_LINE, CANCELLED_LINE), ({**CANCELLED_LINE, "outcome": "completed"},)],
    ids=["none", "on-both-replicas", "wrong-outcome"],
)
def test_a_stopped_answer_logged_other_than_once_cancelled_fails(lines: Lines) -> None:
    result = judge(seen(stop=stopped(lines=lines)), ONE_CPU)
    assert result.verdict == "the usage log does not have one cancelled line for the stopped answer"
    assert result.evidence["usage_lines"] == len(lines)


def test_graded_by_url_there_is_no_usage_log_to_judge() -> None:
    result = judge(seen(stop=stopped(lines=None)), ONE_CPU)
    assert result.passed
    assert result.evidence["usage_log"] == "not read"


def test_no_stream_id_from_the_first_replica_fails_as_resume_does() -> None:
    first = Leg(200, (), SENT, "done")
    result = judge(seen(resumed((first,), stream=None), stopped(stream=None, status=None)), ONE_CPU)
    assert result.verdict == (
        "the response had no X-Stream-Id header, so the stream could not be resumed"
    )


@pytest.mark.parametrize("which", ["resumed", "stopped"])
def test_a_request_that_never_reached_the_upstream_fails_as_forwarding(which: str) -> None:
    observed = seen(resumed(sent=None)) if which == "resumed" else seen(stop=stopped(reached=False))
    result = judge(observed, ONE_CPU)
    assert (result.id, result.verdict) == (
        "resume_replica",
        "the request never reached the upstream",
    )
    assert result.hint.startswith("02_forwarding_proxy: ")


def test_without_a_second_replica_the_check_is_skipped_saying_it_needs_one() -> None:
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=ONE_CPU)
    result = judge(asyncio.run(observe(ctx)), ONE_CPU)
    assert result.skipped and not result.passed and not result.inconclusive
    assert str(result) == "SKIP resume_replica: " + NO_REPLICA
    assert NO_REPLICA == "not run: needs a second replica of the proxy (grade-url's --replica)"
    assert result.hint.startswith("graded by URL, name a second replica")
