"""``cancel_queued`` judges what it saw, in process: the mock's record of a request that waited
for the one slot, against its client's hang-up; the drop just inside and just outside
MAX_STOP_S, a request admitted or left waiting after its client left, an occupier that never
held the slot (inconclusive), the evidence, and every verdict. (The experiment runs over real
sockets in the grader's mutation table: ``queued_unwatched`` waits for the upstream's headers
with nothing watching the client, so the mock keeps the request queued and then starts it.)"""

from __future__ import annotations

from labkit.checks._hang_up import MAX_STOP_S
from labkit.checks.context import INCONCLUSIVE_ADVICE, Record
from labkit.checks.machine import Budget
from labkit.checks.queued import (
    OCCUPY_S,
    EngineObserved,
    Observed,
    admitted,
    judge,
    judge_on_engine,
)
from labkit.checks.result import INCONCLUSIVE, CheckResult

ONE_CPU = Budget(cpus=1.0)

HUNG_UP = 101.8
QUEUED_AT = HUNG_UP - 0.75  # the probe arrived and waited behind the occupier
LITTLE = 0.01
DROPPED = "the upstream dropped the queued request soon after the client left"
STARTED = "the upstream started the queued request after its client had left"
KEPT = "the upstream kept the queued request waiting after its client had left"


def record(
    state: str = "cancelled",
    stop_after: float | None = 0.01,
    *,
    admitted_after: float | None = None,
    queued_at: float | None = QUEUED_AT,
    generated: int = 0,
) -> Record:
    return {
        "state": state,
        "scenario": {"slots": 1, "ttft_ms": 200, "tps": 20, "tokens": 20, "seed": 4702},
        "tokens_generated": generated,
        "queued_at": queued_at,
        "admitted_at": None if admitted_after is None else HUNG_UP + admitted_after,
        "ended_at": None if stop_after is None else HUNG_UP + stop_after,
    }


def seen(rec: Record | None, *, slot_held: bool = True) -> Observed:
    return Observed(slot_held, HUNG_UP, rec)


def test_a_drop_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    inside = judge(seen(record(stop_after=MAX_STOP_S - LITTLE)), ONE_CPU)
    outside = judge(seen(record(stop_after=MAX_STOP_S + LITTLE)), ONE_CPU)
    assert inside.passed
    assert inside.verdict == DROPPED
    assert inside.hint == "see 04_cancel_on_disconnect"
    assert not outside.passed
    assert outside.verdict == KEPT
    assert outside.evidence["upstream_stop_after_hangup_ms"] == round((MAX_STOP_S + LITTLE) * 1000)


def test_a_quick_drop_passes_with_its_evidence() -> None:
    result = judge(seen(record(stop_after=0.006)), ONE_CPU)
    assert result.passed
    assert dict(result.evidence) == {
        "upstream_state": "cancelled",
        "upstream_stop_after_hangup_ms": 6,
        "admitted_to_a_slot": False,
        "tokens_generated": 0,
        "slot_busy_for_ms": round(OCCUPY_S * 1000),
    }


def test_a_request_started_when_the_slot_freed_fails_as_started_after_its_client_left() -> None:
    result = judge(seen(record("completed", 4.2, admitted_after=3.2, generated=20)), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == STARTED
    assert result.evidence["admitted_to_a_slot"] is True
    assert result.hint.startswith(
        "04_cancel_on_disconnect: watch the client while the route waits for the upstream's headers"
    )


def test_a_request_cancelled_in_time_but_after_admission_was_not_dropped_from_the_queue() -> None:
    result = judge(seen(record("cancelled", 0.2, admitted_after=0.1, generated=1)), ONE_CPU)
    assert not result.passed
    assert result.verdict == STARTED


def test_a_request_still_queued_when_the_record_was_read_was_kept_waiting() -> None:
    result = judge(seen(record("queued", None)), ONE_CPU)
    assert result.verdict == KEPT
    assert result.evidence["upstream_state"] == "queued"
    assert result.evidence["upstream_stop_after_hangup_ms"] is None


def test_a_cancelled_record_without_an_end_time_is_not_a_drop() -> None:
    result = judge(seen(record("cancelled", None)), ONE_CPU)
    assert not result.passed
    assert result.verdict == KEPT


def test_a_drop_recorded_before_the_hang_up_counts_as_no_time_at_all() -> None:
    result = judge(seen(record(stop_after=-0.002)), ONE_CPU)
    assert result.passed
    assert result.evidence["upstream_stop_after_hangup_ms"] == 0


def test_an_unheld_slot_with_nothing_queued_is_inconclusive() -> None:
    probe = record("completed", 0.8, admitted_after=-0.8, queued_at=None, generated=20)
    result = judge(seen(probe, slot_held=False), ONE_CPU)
    assert result.outcome == "inconclusive"
    assert result.verdict == "inconclusive: the upstream's one slot was not busy, so nothing queued"
    assert result.evidence[INCONCLUSIVE] == (
        "the request that should have held the slot had not started when the probe was sent"
    )
    assert result.evidence["admitted_to_a_slot"] is True
    assert result.hint == INCONCLUSIVE_ADVICE


def test_an_unheld_slot_is_judged_as_usual_once_the_request_did_queue() -> None:
    dropped = judge(seen(record(stop_after=0.01), slot_held=False), ONE_CPU)
    kept = judge(seen(record("queued", None), slot_held=False), ONE_CPU)
    assert dropped.passed
    assert kept.status == "failed"
    assert kept.verdict == KEPT


def test_a_held_slot_with_a_request_that_never_queued_fails_rather_than_being_excused() -> None:
    probe = record("completed", 0.8, admitted_after=-0.8, queued_at=None, generated=20)
    result = judge(seen(probe), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == STARTED


def test_a_request_that_never_reached_the_upstream_fails_at_forwarding() -> None:
    result = judge(seen(None), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert result.hint.startswith("02_forwarding_proxy: forward POST /v1/chat/completions")
    assert dict(result.evidence) == {}
    assert result.id == "cancel_queued"


def test_only_a_record_out_of_the_queue_counts_as_admitted() -> None:
    assert not admitted(record("queued", None))
    assert admitted(record("running", None, admitted_after=0.0))
    assert admitted(record("cancelled"))


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        judge(seen(None), ONE_CPU),
        judge(seen(record()), ONE_CPU),
        judge(seen(record(stop_after=MAX_STOP_S + LITTLE)), ONE_CPU),
        judge(seen(record("completed", 4.2, admitted_after=3.2)), ONE_CPU),
        judge(
            seen(record("completed", 0.8, queued_at=None, admitted_after=-0.8), slot_held=False),
            ONE_CPU,
        ),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict


# On the engine: the proxy's own connection to it, timed from the client's hang-up.


def engine_seen(
    closed_after: float | None = 0.05, *, busy: bool = True, watched: bool = True
) -> EngineObserved:
    return EngineObserved(slots_busy=busy, sockets_watched=watched, closed_after=closed_after)


def test_on_the_engine_a_connection_closed_within_the_limit_passes_and_one_just_late_fails() -> (
    None
):
    assert judge_on_engine(engine_seen(MAX_STOP_S - LITTLE), ONE_CPU).passed
    late = judge_on_engine(engine_seen(MAX_STOP_S + LITTLE), ONE_CPU)
    assert late.status == "failed"
    assert late.verdict == "the proxy kept the queued request waiting after its client had left"
    assert "while_connected" in late.hint


def test_on_the_engine_a_connection_never_closed_fails_with_no_time() -> None:
    result = judge_on_engine(engine_seen(None), ONE_CPU)
    assert result.status == "failed"
    assert dict(result.evidence) == {
        "engine_slots_busy": True,
        "upstream_closed_after_hangup_ms": None,
    }


def test_on_the_engine_slots_not_all_busy_or_sockets_unseen_are_inconclusive_not_failures() -> None:
    for observed in (engine_seen(None, busy=False), engine_seen(None, watched=False)):
        result = judge_on_engine(observed, ONE_CPU)
        assert result.inconclusive
        assert not any(c.isdigit() for c in result.verdict), result.verdict
