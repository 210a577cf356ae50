"""``keepalive_under_comments`` judges what the client saw, in process: the longest wait for a
byte counted from the request (time 0), a silence just inside and just outside MAX_SILENCE_S, a
grader's pause just above and below GRADER_PAUSE_S, a stream that did not end, no byte at all,
and the evidence. (The experiment runs over real sockets in the grader's mutation table:
``comments_dropped`` takes each upstream comment as a sign of life and drops it, so the client
hears nothing until the first token.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from labkit.checks.comment_silence import (
    COMMENT_EVERY_MS,
    FIRST_TOKEN_S,
    GRADER_PAUSE_S,
    MAX_SILENCE_S,
    Observed,
    judge,
    longest_silence,
)
from labkit.checks.machine import Budget
from labkit.checks.result import INCONCLUSIVE, CheckResult

ONE_CPU = Budget(cpus=1.0)

LITTLE = 0.01
HEADERS_AT = 0.02
QUIET = "the client is never silent for long while the upstream sends SSE comments"
SILENT = "the client heard nothing for longer than a heartbeat while the upstream sent SSE comments"
UNENDED = "a stream whose upstream sent SSE comments before its first token did not end normally"


def tokens_from(start: float) -> tuple[float, ...]:
    """Ten tokens at 20 a second, then [DONE] with the last."""
    return tuple(start + 0.05 * i for i in range(10))


def passed_on(every: float = COMMENT_EVERY_MS / 1000) -> tuple[float, ...]:
    """The headers, a comment every ``every`` seconds until the first token, then the tokens."""
    comments = tuple(every * i for i in range(1, int(FIRST_TOKEN_S / every)))
    return (HEADERS_AT, *comments, *tokens_from(FIRST_TOKEN_S))


def with_gap(gap: float) -> tuple[float, ...]:
    """The headers, one silence of ``gap`` seconds, then the tokens."""
    return (HEADERS_AT, *tokens_from(HEADERS_AT + gap))


def seen(
    arrivals: tuple[float, ...],
    *,
    status: int | None = 200,
    terminal: str = "done",
    comments: int = 15,
    reached: bool = True,
    pause: float = 0.0,
) -> Observed:
    return Observed(status, terminal, arrivals, comments, reached, pause)


# longest_silence ---------------------------------------------------------------------------------


def test_longest_silence_counts_the_wait_for_the_first_byte_from_time_zero() -> None:
    assert longest_silence((5.0, 5.2, 5.3)) == pytest.approx(5.0)


def test_longest_silence_finds_the_longest_gap_between_arrivals() -> None:
    assert longest_silence((0.1, 0.6, 3.6, 3.7)) == pytest.approx(3.0)


def test_longest_silence_reads_arrivals_in_any_order() -> None:
    assert longest_silence((3.6, 0.1, 3.7, 0.6)) == pytest.approx(3.0)


def test_longest_silence_of_one_byte_is_the_wait_for_it() -> None:
    assert longest_silence((2.5,)) == pytest.approx(2.5)


def test_longest_silence_is_none_when_no_byte_came() -> None:
    assert longest_silence(()) is None


# judge -------------------------------------------------------------------------------------------


def test_comments_passed_on_pass_with_their_evidence() -> None:
    result = judge(seen(passed_on()), ONE_CPU)
    assert result.passed
    assert result.verdict == QUIET
    assert result.hint == "see 07_heartbeats_and_timeouts"
    assert dict(result.evidence) == {
        "terminal": "done",
        "client_longest_silence_ms": COMMENT_EVERY_MS,
        "allowed_silence_ms": round(MAX_SILENCE_S * 1000),
        "upstream_first_token_ms": round(FIRST_TOKEN_S * 1000),
        "upstream_comment_every_ms": COMMENT_EVERY_MS,
        "comments_received": 15,
    }


def test_the_proxy_own_heartbeats_pass_without_any_comment() -> None:
    result = judge(seen(passed_on(every=2.0), comments=0), ONE_CPU)
    assert result.passed
    assert result.evidence["client_longest_silence_ms"] == 2000


def test_a_silence_just_inside_the_limit_passes_and_just_outside_fails() -> None:
    inside = judge(seen(with_gap(MAX_SILENCE_S - LITTLE)), ONE_CPU)
    outside = judge(seen(with_gap(MAX_SILENCE_S + LITTLE)), ONE_CPU)
    assert inside.passed
    assert not outside.passed and not outside.skipped
    assert outside.verdict == SILENT
    assert outside.evidence["client_longest_silence_ms"] == round((MAX_SILENCE_S + LITTLE) * 1000)
    assert outside.hint.startswith(
        "07_heartbeats_and_timeouts: time heartbeats from the last bytes the client was sent"
    )


def test_comments_dropped_and_counted_as_activity_leave_the_whole_wait_silent() -> None:
    result = judge(seen(with_gap(FIRST_TOKEN_S), comments=0), ONE_CPU)
    assert result.verdict == SILENT
    assert result.evidence["client_longest_silence_ms"] == round(FIRST_TOKEN_S * 1000)


def test_headers_held_back_count_as_silence_from_the_request() -> None:
    held = tokens_from(MAX_SILENCE_S + LITTLE)
    assert judge(seen(held), ONE_CPU).verdict == SILENT
    assert judge(seen(tokens_from(MAX_SILENCE_S - LITTLE)), ONE_CPU).passed


def test_a_long_silence_while_the_grader_paused_is_inconclusive_and_without_a_pause_fails() -> None:
    quiet = with_gap(FIRST_TOKEN_S)
    paused = judge(seen(quiet, pause=GRADER_PAUSE_S + LITTLE), ONE_CPU)
    unpaused = judge(seen(quiet, pause=GRADER_PAUSE_S - LITTLE), ONE_CPU)
    assert paused.outcome == "inconclusive"
    assert paused.verdict == "inconclusive: the grader paused while it timed the client's silence"
    assert paused.evidence["grader_pause_ms"] == round((GRADER_PAUSE_S + LITTLE) * 1000)
    assert paused.evidence[INCONCLUSIVE] == (
        f"the client waited {round(FIRST_TOKEN_S * 1000)} ms for a byte, but the grader's own "
        f"event loop was held up for {round((GRADER_PAUSE_S + LITTLE) * 1000)} ms meanwhile"
    )
    assert unpaused.status == "failed"
    assert unpaused.verdict == SILENT
    assert "grader_pause_ms" not in unpaused.evidence


def test_a_short_silence_passes_however_long_the_grader_paused() -> None:
    result = judge(seen(passed_on(), pause=5.0), ONE_CPU)
    assert result.passed
    assert "grader_pause_ms" not in result.evidence


@pytest.mark.parametrize(
    "observed",
    [
        seen(passed_on(), terminal="truncated"),
        seen(passed_on(), terminal="error"),
        seen(passed_on(), status=502),
    ],
    ids=["truncated", "error", "status"],
)
def test_a_stream_that_did_not_end_normally_fails_even_when_never_silent(
    observed: Observed,
) -> None:
    result = judge(observed, ONE_CPU)
    assert result.verdict == UNENDED
    assert result.hint.startswith("07_heartbeats_and_timeouts: read comment events as events")


def test_a_stream_that_did_not_end_fails_rather_than_pausing_inconclusively() -> None:
    result = judge(seen(with_gap(FIRST_TOKEN_S), terminal="truncated", pause=3.0), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == UNENDED


def test_a_client_that_got_no_byte_at_all_fails_without_crashing() -> None:
    """Bug: ``longest_silence`` took ``max`` of no gaps, so a proxy that reached the upstream
    and never answered crashed the judge with ValueError. Fix: no byte is no silence to
    measure (None), and the stream did not end normally."""
    result = judge(seen((), status=None, terminal="truncated", comments=0), ONE_CPU)
    assert result.verdict == UNENDED
    assert result.evidence["client_longest_silence_ms"] is None


def test_a_request_that_never_reached_the_upstream_fails_with_its_status() -> None:
    result = judge(seen((HEADERS_AT, 0.03), status=404, terminal="error", reached=False), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert dict(result.evidence) == {"status": 404}
    assert result.hint.startswith("02_forwarding_proxy:")


def test_no_verdict_holds_a_digit() -> None:
    quiet = seen(with_gap(FIRST_TOKEN_S))
    results: list[CheckResult] = [
        judge(seen(passed_on()), ONE_CPU),
        judge(quiet, ONE_CPU),
        judge(replace(quiet, grader_pause_s=3.0), ONE_CPU),
        judge(seen(passed_on(), terminal="truncated"), ONE_CPU),
        judge(seen((), status=None, terminal="truncated"), ONE_CPU),
        judge(seen((), status=None, reached=False), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
