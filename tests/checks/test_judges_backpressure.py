"""``backpressure`` judges what it saw, in process: constructed samples of the upstream's sent
count and the slow reader's progress, each limit (LEAD_LIMIT, MAX_CREEP, MIN_FLOWING, PLATEAU_S)
just inside and just outside, every verdict, and the window each machine's Budget gives. (The
experiment runs over real sockets in test_backpressure_check.py, test_backpressure_read_ahead.py
and test_grading_mutants.py.)"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from labkit.checks.backpressure import (
    LEAD_LIMIT,
    MAX_CREEP,
    MAX_WINDOW_STRETCH,
    MEMORY_GROWTH_MB,
    MIN_FLOWING,
    PLATEAU_S,
    WINDOW_S,
    BackpressureEvidence,
    Sample,
    judge,
    watch_outcome,
    window_s,
)
from labkit.checks.machine import Budget

ONE_CPU = Budget(cpus=1.0)
LITTLE = 0.01
HELD = "a slow reader holds back what the upstream can send, so the proxy's memory stays bounded"
READ_AHEAD = "the proxy reads the upstream ahead of a slow client without bound"
NO_STREAM = "the slow reader got no stream to read"
ENDED_EARLY = (
    "the stream to a slow reader ended early instead of holding back what the upstream sends"
)
INCONCLUSIVE = "inconclusive: the machine was too slow to fill the socket buffers in time"


def flowing(until: int = 60_000, steps: int = 20) -> list[Sample]:
    """The upstream sending fast for two seconds while the client reads a token a poll."""
    return [Sample(i / 10, sent=until * (i + 1) // steps, read=i, reads=i) for i in range(steps)]


def standstill(
    at: int, *, creep: int = 0, start: float = 2.0, polls: int = 12, reading: bool = True
) -> list[Sample]:
    """The sent count standing at ``at`` (``creep`` more by the end) for ``polls`` polls."""
    return [
        Sample(
            start + i / 10,
            sent=at + creep * i // (polls - 1),
            read=20 + (i if reading else 0),
            reads=20 + (i if reading else 0),
        )
        for i in range(polls)
    ]


def seen(
    samples: list[Sample],
    *,
    stream_over: bool = False,
    state: str = "running",
    status: int | None = 200,
    error: str | None = None,
    ended_by_itself: bool = False,
    rss_growth_mb: float | None = None,
) -> BackpressureEvidence:
    return BackpressureEvidence(
        samples=tuple(samples),
        stream_over=stream_over,
        upstream_state=state,
        upstream_tokens_generated=400_000,
        client_tokens_read=samples[-1].read if samples else 0,
        status=status,
        error=error,
        ended_by_itself=ended_by_itself,
        rss_growth_mb=rss_growth_mb,
    )


def judged(evidence: BackpressureEvidence, budget: Budget = ONE_CPU) -> tuple[str, str]:
    result = judge(evidence, budget)
    return result.outcome, result.verdict


# held back: a pass -------------------------------------------------------------------------------


def test_a_standstill_while_the_client_reads_passes_with_its_evidence() -> None:
    samples = [*flowing(), *standstill(60_000)]
    result = judge(seen(samples), ONE_CPU)
    assert result.passed
    assert result.verdict == HELD
    assert result.hint == "see 10_backpressure_and_slow_clients"
    last = samples[-1]
    assert dict(result.evidence) == {
        "upstream_tokens_sent": 60_000,
        "upstream_tokens_generated": 400_000,
        "client_tokens_read": last.read,
        "lead_tokens": 60_000 - last.read,
        "max_lead_tokens": 60_000 - 19,  # the last flowing sample
        "upstream_state": "running",
        "decided_after_ms": round(last.t * 1000),
        "rss_growth_mb": None,
        "window_ms": round(WINDOW_S * 1000),
    }


def test_the_upstream_may_creep_by_max_creep_tokens_and_no_more() -> None:
    assert judged(seen([*flowing(), *standstill(60_000, creep=MAX_CREEP)]))[1] == HELD
    status, verdict = judged(seen([*flowing(), *standstill(60_000, creep=MAX_CREEP + 1)]))
    assert (status, verdict) == ("inconclusive", INCONCLUSIVE)


def test_a_standstill_counts_only_once_min_flowing_tokens_were_sent() -> None:
    flowed = [Sample(0.0, MIN_FLOWING, 0, 0), *standstill(MIN_FLOWING, start=0.5)]
    assert judged(seen(flowed))[1] == HELD
    barely = [Sample(0.0, MIN_FLOWING - 1, 0, 0), *standstill(MIN_FLOWING - 1, start=0.5)]
    assert judged(seen(barely)) == ("inconclusive", INCONCLUSIVE)


def test_a_standstill_must_last_longer_than_plateau_s() -> None:
    first = Sample(2.0, 60_000, 20, 20)
    just_over = [*flowing(until=52_000), first, Sample(2.0 + PLATEAU_S + LITTLE, 60_000, 25, 25)]
    assert judged(seen(just_over))[1] == HELD
    just_under = [*flowing(until=52_000), first, Sample(2.0 + PLATEAU_S - LITTLE, 60_000, 25, 25)]
    # the last sample before the plateau is then a flowing one, 8,000 tokens behind
    assert judged(seen(just_under)) == ("inconclusive", INCONCLUSIVE)


def test_a_standstill_while_the_client_reads_nothing_is_inconclusive_not_a_pass() -> None:
    result = judge(seen([*flowing(), *standstill(60_000, reading=False)]), ONE_CPU)
    assert result.outcome == "inconclusive"
    assert result.verdict == INCONCLUSIVE
    reason = str(result.evidence["inconclusive"])
    assert reason.startswith("the upstream's sent count stood still at 60000 tokens")
    assert "got no CPU to read" in reason


# read ahead: a fail ------------------------------------------------------------------------------


def test_a_lead_over_the_limit_fails_and_one_at_it_does_not() -> None:
    over = [*flowing(), Sample(2.0, LEAD_LIMIT + 21, 20, 20)]
    status, verdict = judged(seen(over))
    assert status == "failed" and verdict.startswith(READ_AHEAD)
    at = [*flowing(), Sample(2.0, LEAD_LIMIT + 20, 20, 20)]
    assert judged(seen(at)) == ("inconclusive", INCONCLUSIVE)


@pytest.mark.parametrize(
    ("growth_mb", "kept"),
    [
        (None, "(where it keeps what it read was not measured)"),
        (
            MEMORY_GROWTH_MB - LITTLE,
            ", keeping what it read outside memory (in a temporary file, say)",
        ),
        (MEMORY_GROWTH_MB, ", and its memory grows with what it read"),
    ],
)
def test_a_read_ahead_verdict_says_where_what_was_read_went(
    growth_mb: float | None, kept: str
) -> None:
    samples = [*flowing(), Sample(2.0, LEAD_LIMIT + 1_000, 20, 20)]
    result = judge(seen(samples, rss_growth_mb=growth_mb), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == f"{READ_AHEAD} {kept}".replace(" ,", ",")
    assert not re.search(r"\d", result.verdict)
    assert result.hint.startswith("10_backpressure_and_slow_clients: let the client's pace")
    assert result.evidence["rss_growth_mb"] == (None if growth_mb is None else round(growth_mb, 3))


def test_an_upstream_that_sent_its_whole_stream_to_the_proxy_fails_as_read_ahead() -> None:
    samples = [*flowing(until=150_000)]
    result = judge(seen(samples, stream_over=True, state="completed"), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict.startswith(READ_AHEAD)


def test_a_lead_over_the_limit_fails_even_in_a_standstill() -> None:
    samples = [*flowing(until=LEAD_LIMIT + 100), *standstill(LEAD_LIMIT + 100)]
    assert watch_outcome(samples, stream_over=False) == "ahead"
    assert judged(seen(samples))[0] == "failed"


# no stream, or a stream ended early: a fail ------------------------------------------------------


def test_a_reader_answered_with_an_error_status_got_no_stream() -> None:
    result = judge(seen(flowing(), status=502, ended_by_itself=True), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == NO_STREAM
    assert result.hint.startswith("02_forwarding_proxy: forward the upstream's stream")
    assert result.evidence["status"] == 502 and result.evidence["error"] is None


def test_a_reader_whose_upstream_never_sent_got_no_stream() -> None:
    nothing = [Sample(i / 10, 0, 0, 0) for i in range(5)]
    result = judge(seen(nothing, ended_by_itself=True), ONE_CPU)
    assert result.verdict == NO_STREAM
    empty = judge(seen([], status=None, error="ConnectError"), ONE_CPU)
    assert empty.verdict == NO_STREAM
    assert empty.evidence["error"] == "ConnectError"
    assert empty.evidence["decided_after_ms"] == 0 and empty.evidence["max_lead_tokens"] == 0


def test_a_stream_the_proxy_ended_early_fails_saying_so() -> None:
    result = judge(seen(flowing(), ended_by_itself=True, error="RemoteProtocolError"), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == ENDED_EARLY
    assert result.evidence["error"] == "RemoteProtocolError"
    assert result.hint.startswith("10_backpressure_and_slow_clients: keep a slow client's")


def test_an_upstream_request_cancelled_before_it_was_sent_whole_is_a_stream_ended_early() -> None:
    cancelled = seen(flowing(), stream_over=True, state="cancelled")
    assert judged(cancelled) == ("failed", ENDED_EARLY)


# the window closed first: inconclusive ------------------------------------------------------------


def test_a_window_that_closes_while_the_upstream_still_sends_is_inconclusive() -> None:
    result = judge(seen(flowing(until=80_000)), ONE_CPU)
    assert result.outcome == "inconclusive" and result.skipped
    assert result.verdict == INCONCLUSIVE
    reason = str(result.evidence["inconclusive"])
    assert reason.startswith("after 1.9 s the upstream had sent 80000 tokens and was still sending")
    assert f"(under {LEAD_LIMIT})" in reason


def test_a_single_sample_is_still_moving() -> None:
    result = judge(seen([Sample(0.1, 5_000, 0, 0)]), ONE_CPU)
    assert str(result.evidence["inconclusive"]).startswith("after 0.1 s the upstream had sent")


# the rules the watch stops on, and the window ----------------------------------------------------


def test_the_watch_stops_on_a_finished_stream_first_then_a_lead_then_a_standstill() -> None:
    held = [*flowing(), *standstill(60_000)]
    ahead = [*flowing(), Sample(2.0, LEAD_LIMIT + 100, 20, 20)]
    assert watch_outcome(held, stream_over=True) == "finished"
    assert watch_outcome(ahead, stream_over=False) == "ahead"
    assert watch_outcome(held, stream_over=False) == "held"
    assert watch_outcome(flowing(), stream_over=False) is None
    assert watch_outcome([], stream_over=False) is None


@pytest.mark.parametrize(
    ("cpus", "window"),
    [
        (4.0, WINDOW_S),
        (1.0, WINDOW_S),
        (1.0 - LITTLE, WINDOW_S / (1.0 - LITTLE)),
        (0.5, WINDOW_S * MAX_WINDOW_STRETCH),
        (0.25, WINDOW_S * MAX_WINDOW_STRETCH),  # budgets stretch x4 there; the window x2 at most
    ],
)
def test_the_window_stretches_below_one_cpu_up_to_twice(cpus: float, window: float) -> None:
    assert window_s(Budget(cpus=cpus)) == pytest.approx(window)
    verdict = judge(seen([*flowing(), *standstill(60_000)]), Budget(cpus=cpus))
    assert verdict.evidence["window_ms"] == round(window * 1000)


def test_the_judge_reads_nothing_but_its_arguments() -> None:
    """Same evidence and budget, same result: nothing about the machine it runs on."""
    evidence = seen([*flowing(), *standstill(60_000)], rss_growth_mb=1.4)
    assert judge(evidence, Budget(cpus=0.5)) == judge(replace(evidence), Budget(cpus=0.5))
