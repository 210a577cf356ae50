"""``cancel_whole_answer`` judges what it saw, in process: the mock's record of a whole
(non-streamed) answer against the client's hang-up, the stop just inside and just outside
MAX_STOP_S, every verdict and the evidence; and the engine variant's observations, by the closed
socket or, without a view of the sockets, by the engine's idle time. (The experiment runs over
real sockets in the grader's mutation table: ``whole_answer_unwatched`` reads the answer with
nothing watching the client, and the upstream generates all of it.)"""

from __future__ import annotations

import pytest

from labkit.checks._hang_up import ENGINE_NOTICE_S, MAX_STOP_S
from labkit.checks.context import INCONCLUSIVE_ADVICE, Record
from labkit.checks.machine import Budget
from labkit.checks.result import INCONCLUSIVE, CheckResult
from labkit.checks.whole_answer import (
    ENGINE_HANG_UP_DECODES,
    ENGINE_START_S,
    ENGINE_TOKENS,
    TOKENS,
    EngineObserved,
    Observed,
    judge,
    judge_on_engine,
)

ONE_CPU = Budget(cpus=1.0)

HUNG_UP = 101.2
LITTLE = 0.01
PROMPTLY = "the upstream stopped the whole answer soon after the client left"
LATE = "the upstream did not stop the whole answer promptly when the client left"
WHOLE = "the upstream generated the whole answer after the client had left"


def record(
    state: str = "cancelled", stop_after: float | None = 0.02, generated: int = 24
) -> Record:
    return {
        "state": state,
        "scenario": {"ttft_ms": 200, "tps": 20, "tokens": TOKENS, "seed": 4601},
        "stream": False,
        "tokens_generated": generated,
        "ended_at": None if stop_after is None else HUNG_UP + stop_after,
    }


def seen(rec: Record | None) -> Observed:
    return Observed(HUNG_UP, rec)


# on the mock -------------------------------------------------------------------------------------


def test_a_stop_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    inside = judge(seen(record(stop_after=MAX_STOP_S - LITTLE)), ONE_CPU)
    outside = judge(seen(record(stop_after=MAX_STOP_S + LITTLE)), ONE_CPU)
    assert inside.passed
    assert inside.verdict == PROMPTLY
    assert inside.hint == "see 06_midstream_errors"
    assert not outside.passed
    assert outside.verdict == LATE
    assert outside.evidence["upstream_stop_after_hangup_ms"] == round((MAX_STOP_S + LITTLE) * 1000)


def test_a_quick_stop_passes_with_its_evidence() -> None:
    result = judge(seen(record(stop_after=0.004, generated=24)), ONE_CPU)
    assert result.passed
    assert dict(result.evidence) == {
        "upstream_state": "cancelled",
        "upstream_stop_after_hangup_ms": 4,
        "tokens_generated": 24,
        "tokens_asked": TOKENS,
    }


def test_a_stop_recorded_before_the_hang_up_counts_as_no_time_at_all() -> None:
    result = judge(seen(record(stop_after=-0.003)), ONE_CPU)
    assert result.passed
    assert result.evidence["upstream_stop_after_hangup_ms"] == 0


def test_an_answer_completed_after_the_client_left_was_generated_whole() -> None:
    result = judge(seen(record(state="completed", stop_after=18.8, generated=TOKENS)), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == WHOLE
    assert result.hint.startswith("06_midstream_errors: watch the client while the route reads")
    assert result.evidence["upstream_stop_after_hangup_ms"] == 18800
    assert result.evidence["tokens_generated"] == TOKENS


def test_an_answer_completed_within_the_limit_is_still_not_a_stop() -> None:
    result = judge(seen(record(state="completed", stop_after=0.05, generated=TOKENS)), ONE_CPU)
    assert not result.passed
    assert result.verdict == WHOLE


def test_an_upstream_still_running_has_no_stop_time_even_with_an_end_in_its_record() -> None:
    result = judge(seen(record(state="running", stop_after=0.5, generated=60)), ONE_CPU)
    assert result.verdict == WHOLE
    assert result.evidence["upstream_state"] == "running"
    assert result.evidence["upstream_stop_after_hangup_ms"] is None


def test_a_cancelled_record_without_an_end_time_is_not_a_stop() -> None:
    result = judge(seen(record(state="cancelled", stop_after=None)), ONE_CPU)
    assert not result.passed
    assert result.verdict == LATE
    assert result.evidence["upstream_stop_after_hangup_ms"] is None


def test_an_errored_upstream_did_not_stop_promptly() -> None:
    result = judge(seen(record(state="errored", stop_after=0.05)), ONE_CPU)
    assert result.verdict == LATE


def test_a_request_that_never_reached_the_upstream_fails_at_forwarding() -> None:
    result = judge(seen(None), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert result.hint.startswith("02_forwarding_proxy: forward POST /v1/chat/completions")
    assert dict(result.evidence) == {}
    assert result.id == "cancel_whole_answer"


# on an engine ------------------------------------------------------------------------------------


def on_engine(
    closed_after: float | None = 0.01,
    idle_after: float | None = 0.9,
    *,
    watched: bool = True,
    started: bool = True,
    decoded: int = 3,
) -> EngineObserved:
    return EngineObserved(started, watched, closed_after, idle_after, decoded)


def test_engine_a_socket_closed_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    inside = judge_on_engine(on_engine(MAX_STOP_S - LITTLE), ONE_CPU)
    outside = judge_on_engine(on_engine(MAX_STOP_S + LITTLE), ONE_CPU)
    assert inside.passed and inside.verdict == PROMPTLY
    assert not outside.passed
    assert outside.verdict == LATE
    assert outside.hint.startswith("06_midstream_errors: watch the client")


def test_engine_evidence_names_the_closed_socket_and_not_how_it_was_judged() -> None:
    result = judge_on_engine(on_engine(0.012, 0.85, decoded=3), ONE_CPU)
    assert dict(result.evidence) == {
        "upstream_closed_after_hangup_ms": 12,
        "upstream_idle_after_hangup_ms": 850,
        "tokens_decoded_after_hangup": 3,
        "tokens_asked": ENGINE_TOKENS,
    }


def test_engine_a_socket_never_closed_means_the_whole_answer_was_generated() -> None:
    result = judge_on_engine(on_engine(None, None, decoded=ENGINE_TOKENS - 12), ONE_CPU)
    assert result.verdict == WHOLE
    assert result.evidence["upstream_closed_after_hangup_ms"] is None


def test_engine_with_sockets_watched_an_idle_engine_does_not_excuse_an_open_connection() -> None:
    result = judge_on_engine(on_engine(None, 0.3), ONE_CPU)
    assert not result.passed
    assert result.verdict == WHOLE


@pytest.mark.parametrize(
    ("idle_after", "passed"),
    [(MAX_STOP_S + ENGINE_NOTICE_S - LITTLE, True), (MAX_STOP_S + ENGINE_NOTICE_S + LITTLE, False)],
)
def test_engine_without_sockets_the_idle_time_is_judged_with_the_engine_notice(
    idle_after: float, passed: bool
) -> None:
    result = judge_on_engine(on_engine(None, idle_after, watched=False), ONE_CPU)
    assert result.passed is passed
    assert result.evidence["judged_by"] == "engine idle time"
    if not passed:
        assert result.verdict == LATE


def test_engine_without_sockets_an_engine_never_idle_generated_the_whole_answer() -> None:
    result = judge_on_engine(
        on_engine(None, None, watched=False, decoded=ENGINE_TOKENS - 12), ONE_CPU
    )
    assert result.verdict == WHOLE
    assert result.evidence["judged_by"] == "engine idle time"


def test_engine_late_close_is_not_called_a_whole_answer() -> None:
    """Bug: every failure on an engine said the upstream generated the whole answer, even when
    the proxy closed its connection a little late and the engine stopped. Fix: a stop that was
    seen, only late, is "did not stop promptly"; "generated the whole answer" is kept for a
    stop never seen."""
    result = judge_on_engine(on_engine(1.4, 2.2, decoded=30), ONE_CPU)
    assert result.verdict == LATE


def test_engine_that_never_started_decoding_is_inconclusive() -> None:
    result = judge_on_engine(on_engine(None, None, started=False, decoded=0), ONE_CPU)
    assert result.outcome == "inconclusive"
    assert result.verdict == "inconclusive: the engine was too slow to start generating"
    assert result.evidence[INCONCLUSIVE] == (
        f"it did not decode {ENGINE_HANG_UP_DECODES} tokens in {ENGINE_START_S:g} s"
    )
    assert result.hint == INCONCLUSIVE_ADVICE


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        judge(seen(None), ONE_CPU),
        judge(seen(record()), ONE_CPU),
        judge(seen(record(stop_after=MAX_STOP_S + LITTLE)), ONE_CPU),
        judge(seen(record(state="completed", stop_after=18.8)), ONE_CPU),
        judge_on_engine(on_engine(), ONE_CPU),
        judge_on_engine(on_engine(MAX_STOP_S + LITTLE), ONE_CPU),
        judge_on_engine(on_engine(None, None), ONE_CPU),
        judge_on_engine(on_engine(started=False), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
