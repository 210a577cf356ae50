"""``cancel`` and ``cancel_before_first_token`` judge what they saw, in process: the mock's record
against the client's hang-up, each limit just inside and just outside, every verdict; and the same
for the engine variants' observations. (The experiments run over real sockets in
test_grading_mutants.py and tests/grading/test_engine_checks.py.)"""

from __future__ import annotations

import pytest

from labkit.checks import cancel, cancel_before_first_token
from labkit.checks._hang_up import ENGINE_NOTICE_S, MAX_STOP_S, HungUp
from labkit.checks.cancel import ENGINE_TOKENS as ENGINE_CANCEL_TOKENS
from labkit.checks.cancel import EngineNeverStarted, EngineStopped
from labkit.checks.cancel_before_first_token import EngineObserved as EngineEarly
from labkit.checks.context import Record
from labkit.checks.machine import Budget

ONE_CPU = Budget(cpus=1.0)

HUNG_UP = 101.2
LITTLE = 0.01


def record(
    state: str = "cancelled",
    stop_after: float | None = 0.05,
    generated: int = 25,
    first: float | None = 100.0,
) -> Record:
    return {
        "state": state,
        "scenario": {"tps": 20, "seed": 4201},
        "first_token_at": first,
        "tokens_generated": generated,
        "ended_at": None if stop_after is None else HUNG_UP + stop_after,
    }


def hung_up(rec: Record | None) -> HungUp:
    return HungUp(HUNG_UP, rec)


# cancel ------------------------------------------------------------------------------------------


def test_cancel_passes_a_stop_just_inside_the_limit_and_fails_one_just_outside() -> None:
    inside = cancel.judge(hung_up(record(stop_after=MAX_STOP_S - LITTLE)), ONE_CPU)
    outside = cancel.judge(hung_up(record(stop_after=MAX_STOP_S + LITTLE)), ONE_CPU)
    assert inside.passed
    assert inside.verdict == "the upstream stopped soon after the client left"
    assert inside.hint == "see 04_cancel_on_disconnect"
    assert not outside.passed
    assert outside.verdict == "the upstream did not stop promptly when the client left"
    assert outside.evidence["upstream_stop_after_hangup_ms"] == round((MAX_STOP_S + LITTLE) * 1000)


def test_cancel_passes_a_quick_stop_and_reports_its_evidence() -> None:
    result = cancel.judge(hung_up(record(stop_after=0.004, generated=25)), ONE_CPU)
    assert result.passed
    assert dict(result.evidence) == {
        "upstream_state": "cancelled",
        "upstream_stop_after_hangup_ms": 4,
        "tokens_generated": 25,
        "tokens_after_hang_up": 0,
    }


def test_cancel_fails_an_upstream_still_running_after_the_client_left() -> None:
    result = cancel.judge(hung_up(record(state="running", stop_after=None, generated=60)), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == "the upstream kept generating after the client left"
    assert result.hint.startswith("04_cancel_on_disconnect: read the upstream inside")
    assert result.evidence["upstream_stop_after_hangup_ms"] is None


def test_cancel_fails_a_stream_that_completed_in_time_instead_of_being_cancelled() -> None:
    result = cancel.judge(hung_up(record(state="completed", stop_after=0.1)), ONE_CPU)
    assert result.verdict == "the upstream did not stop promptly when the client left"


def test_cancel_fails_a_request_that_never_reached_the_upstream() -> None:
    result = cancel.judge(hung_up(None), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert result.hint.startswith("02_forwarding_proxy: forward POST")
    assert dict(result.evidence) == {}


# cancel_before_first_token ----------------------------------------------------------------------


def early(stop_after: float | None, generated: int = 0, state: str = "cancelled") -> HungUp:
    return hung_up(record(state=state, stop_after=stop_after, generated=generated, first=None))


def test_early_cancel_passes_a_stop_just_inside_the_limit_and_fails_one_just_outside() -> None:
    inside = cancel_before_first_token.judge(early(MAX_STOP_S - LITTLE), ONE_CPU)
    outside = cancel_before_first_token.judge(early(MAX_STOP_S + LITTLE), ONE_CPU)
    assert inside.passed
    assert inside.verdict == "the upstream stopped before its first token when the client left"
    assert not outside.passed
    assert outside.verdict == "the upstream did not stop promptly when the client left early"
    assert outside.hint.startswith("04_cancel_on_disconnect: close the upstream")


def test_early_cancel_fails_a_stop_in_time_that_made_a_token_first() -> None:
    result = cancel_before_first_token.judge(early(0.05, generated=1), ONE_CPU)
    assert result.verdict == "the upstream went on to its first token after the client had left"
    assert result.evidence["tokens_after_hang_up"] == 1


def test_early_cancel_fails_an_upstream_still_running() -> None:
    result = cancel_before_first_token.judge(early(None, state="running"), ONE_CPU)
    assert result.verdict == "the upstream went on to its first token after the client had left"


def test_early_cancel_fails_a_request_that_never_reached_the_upstream() -> None:
    result = cancel_before_first_token.judge(hung_up(None), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert result.id == "cancel_before_first_token"


# cancel on an engine ----------------------------------------------------------------------------


def stopped(after: float | None, generated: int = 14) -> EngineStopped:
    return EngineStopped(after, 10, 2, generated)


def test_engine_cancel_passes_an_idle_engine_just_inside_the_limit_only() -> None:
    inside = cancel.judge_on_engine(stopped(MAX_STOP_S - LITTLE), ONE_CPU)
    outside = cancel.judge_on_engine(stopped(MAX_STOP_S + LITTLE), ONE_CPU)
    assert inside.passed and inside.verdict == "the upstream stopped soon after the client left"
    assert dict(inside.evidence) == {
        "upstream_state": "stopped",
        "upstream_stop_after_hangup_ms": round((MAX_STOP_S - LITTLE) * 1000),
        "tokens_decoded_before_hangup": 10,
        "tokens_decoded_after_hangup": 2,
        "tokens_generated": 14,
        "tokens_asked": ENGINE_CANCEL_TOKENS,
    }
    assert outside.verdict == "the upstream did not stop promptly when the client left"


def test_engine_cancel_fails_an_engine_that_made_every_token_asked() -> None:
    assert cancel.judge_on_engine(stopped(0.05, ENGINE_CANCEL_TOKENS - 1), ONE_CPU).passed
    result = cancel.judge_on_engine(stopped(0.05, ENGINE_CANCEL_TOKENS), ONE_CPU)
    assert result.verdict == "the upstream did not stop promptly when the client left"


def test_engine_cancel_fails_an_engine_still_running() -> None:
    result = cancel.judge_on_engine(stopped(None, ENGINE_CANCEL_TOKENS), ONE_CPU)
    assert result.verdict == "the upstream kept generating after the client left"
    assert result.evidence["upstream_state"] == "running"


def test_an_engine_that_never_started_is_inconclusive_if_it_saw_the_request() -> None:
    result = cancel.judge_on_engine(EngineNeverStarted(200, 40, 3, 1), ONE_CPU)
    assert result.outcome == "inconclusive"
    assert result.verdict == "inconclusive: the engine was too slow to start generating"
    assert result.evidence["status"] == 200


def test_an_engine_that_never_saw_the_request_fails() -> None:
    result = cancel.judge_on_engine(EngineNeverStarted(None, 0, 0, 0), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == "the request never reached the upstream"
    assert dict(result.evidence) == {"status": None, "engine_prompt_tokens": 0}


# cancel_before_first_token on an engine ----------------------------------------------------------


def engine_early(
    closed_after: float | None = 0.01,
    idle_after: float | None = 0.9,
    *,
    watched: bool = True,
    tokens: int = 0,
    prompt: int = 96,
    status: int | None = 200,
) -> EngineEarly:
    return EngineEarly(status, 30, 4.0, watched, closed_after, idle_after, prompt, tokens)


def test_engine_early_cancel_judges_the_closed_socket_against_the_limit() -> None:
    inside = cancel_before_first_token.judge_on_engine(engine_early(MAX_STOP_S - LITTLE), ONE_CPU)
    outside = cancel_before_first_token.judge_on_engine(engine_early(MAX_STOP_S + LITTLE), ONE_CPU)
    assert inside.passed
    assert "judged_by" not in inside.evidence
    assert inside.evidence["first_token_due_ms"] == 4000
    assert outside.verdict == "the upstream did not stop promptly when the client left early"


@pytest.mark.parametrize(
    ("idle_after", "passed"),
    [(MAX_STOP_S + ENGINE_NOTICE_S - LITTLE, True), (MAX_STOP_S + ENGINE_NOTICE_S + LITTLE, False)],
)
def test_without_sockets_the_engine_idle_time_is_judged_with_its_notice(
    idle_after: float, passed: bool
) -> None:
    result = cancel_before_first_token.judge_on_engine(
        engine_early(None, idle_after, watched=False), ONE_CPU
    )
    assert result.passed is passed
    assert result.evidence["judged_by"] == "engine idle time"


def test_engine_early_cancel_in_time_with_a_token_made_is_inconclusive() -> None:
    result = cancel_before_first_token.judge_on_engine(engine_early(0.01, tokens=2), ONE_CPU)
    assert result.outcome == "inconclusive"
    assert result.verdict.startswith("inconclusive: the engine made its first token before")
    assert "llama-server --batch-size 32" in result.hint


def test_engine_early_cancel_late_with_a_token_made_fails() -> None:
    result = cancel_before_first_token.judge_on_engine(engine_early(None, None, tokens=8), ONE_CPU)
    assert result.verdict == "the upstream went on to its first token after the client had left"


def test_engine_early_cancel_fails_a_request_the_engine_never_saw() -> None:
    never = engine_early(None, 0.0, prompt=0, status=None)
    assert cancel_before_first_token.judge_on_engine(never, ONE_CPU).verdict == (
        "the request never reached the upstream"
    )
    answered = engine_early(None, 0.0, prompt=0, status=502)
    assert cancel_before_first_token.judge_on_engine(answered, ONE_CPU).verdict == (
        "the upstream did not stop promptly when the client left early"
    )
