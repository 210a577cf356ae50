"""``concurrency`` tells a pool too small from a blocked event loop, from the mock's records and
its probes, without a clock of its own: a stream that reached the upstream only after another
stream of the burst had ended there waited for a pool connection."""

from __future__ import annotations

import httpx
import pytest

from labkit.capture import Capture
from labkit.checks.concurrency import (
    ENGINE_MAX_PROBE_S,
    HELD_SHARE,
    IDLE_EXPIRY_S,
    IDLE_SHARE,
    MAX_PROBE_S,
    Measured,
    idle_wait_s,
    reached_together,
    verdict,
)
from labkit.checks.context import Record

SEEDS = range(100, 106)


def record(seed: int, started: float, ended: float | None, state: str = "completed") -> Record:
    return {
        "scenario": {"seed": seed},
        "started_at": started,
        "ended_at": ended,
        "state": state if ended is not None else "running",
    }


def test_streams_that_arrive_after_the_first_end_waited() -> None:
    records = [record(100 + i, 10.0 + 0.1 * i, 14.0 + 0.1 * i) for i in range(4)]
    records += [record(104, 14.05, 18.0), record(105, 14.2, 18.1)]  # after the first end, 14.0
    records += [record(999, 9.0, 9.5)]  # another check's request: not counted
    assert reached_together(records, SEEDS) == (4, 2)


def test_a_stream_that_failed_early_does_not_make_the_later_arrivals_late() -> None:
    """A stream cancelled or failed 0.3 s in (a dropped connection) ended long before any stream
    of the burst could complete: the streams that arrived after it did not wait for it."""
    records = [record(100, 10.0, 10.3, state="cancelled"), record(101, 10.1, 10.4, "errored")]
    records += [record(100 + i, 10.0 + 0.1 * i, 15.0 + 0.1 * i) for i in range(2, 6)]
    assert reached_together(records, SEEDS) == (6, 0)


def test_a_request_that_never_ended_does_not_hide_the_others() -> None:
    records = [record(100 + i, 10.0 + 0.1 * i, None) for i in range(6)]
    assert reached_together(records, SEEDS) == (6, 0)


def test_an_earlier_attempt_and_a_request_that_never_arrived_are_not_late() -> None:
    """Five of six arrived together (one never reached the upstream: not a pool wait), and an
    earlier attempt of the check, before ``since``, ended long before them."""
    records = [record(100 + i, 10.0 + 0.1 * i, 14.0) for i in range(5)]
    records += [record(100, 2.0, 3.0)]
    assert reached_together(records, SEEDS, since=9.0) == (5, 0)


def test_a_burst_after_another_waits_until_its_idle_connections_have_expired() -> None:
    """An earlier attempt's streams ended at 14.0 and 14.5 (one never ended: it started at
    14.9): a burst at 15.0 waits until 14.9 + IDLE_EXPIRY_S, when httpx's pool has closed them;
    other checks' requests and a burst long past make it wait for nothing."""
    earlier = [record(100, 10.0, 14.0), record(101, 10.1, 14.5), record(102, 14.9, None)]
    assert idle_wait_s(earlier, SEEDS, now=15.0) == pytest.approx(14.9 + IDLE_EXPIRY_S - 15.0)
    assert httpx.Limits().keepalive_expiry == 5.0 < IDLE_EXPIRY_S  # httpx's default expiry
    assert idle_wait_s([record(999, 10.0, 14.9)], SEEDS, now=15.0) == 0.0
    assert idle_wait_s(earlier, SEEDS, now=14.9 + IDLE_EXPIRY_S + 0.1) == 0.0
    assert idle_wait_s([], SEEDS, now=15.0) == 0.0


def measured(
    together: int | None, slowest_probe: float = 0.01, upstream_slowest: float = 0.004
) -> Measured:
    late = None if together is None else 6 - together
    return Measured(
        streams=6,
        completed=[Capture("http://proxy", terminal="done", total_time=4.0)] * 6,
        idle_probes=[0.002] * 5,
        probes=[0.003] * 20 + [slowest_probe],
        elapsed=8.0,
        reached_together=together,
        reached_late=late,
        upstream_probes=[0.002] * 20 + [upstream_slowest],
    )


def test_all_through_but_some_waited_fails_saying_they_waited() -> None:
    result = verdict(measured(4), MAX_PROBE_S)
    assert result.status == "failed"
    assert result.verdict.startswith("some streams waited: they reached the upstream only after")
    assert "httpx.Limits" in result.hint
    assert result.evidence["reached_upstream_together"] == 4
    assert result.evidence["reached_upstream_late"] == 2


def test_queued_streams_with_one_slow_probe_fail_when_the_upstream_answered_at_once() -> None:
    """A proxy whose workers are all busy (Apache with fewer threads than streams): most probes
    answered at once, one waited, and streams queued; the upstream, probed directly, answered in
    milliseconds all along. The machine did not pause: the streams waited, and that fails."""
    result = verdict(measured(4, slowest_probe=4.2), MAX_PROBE_S)
    assert result.status == "failed"
    assert result.verdict.startswith("some streams waited")


def test_a_machine_pause_is_inconclusive_when_the_upstream_was_slow_too() -> None:
    """The upstream's own probe slow at the same time: the whole machine paused, which also
    delays the requests sent meanwhile: not a verdict on the proxy."""
    result = verdict(measured(4, slowest_probe=4.2, upstream_slowest=1.2), MAX_PROBE_S)
    assert result.status == "skipped" and result.verdict.startswith("inconclusive:")
    assert result.evidence["upstream_probe_max_ms"] == 1200


def test_the_upstream_bound_for_a_pause_is_a_quarter_of_the_probe_limit() -> None:
    bound = MAX_PROBE_S / IDLE_SHARE
    below = verdict(measured(4, slowest_probe=4.2, upstream_slowest=bound - 0.01), MAX_PROBE_S)
    above = verdict(measured(4, slowest_probe=4.2, upstream_slowest=bound + 0.01), MAX_PROBE_S)
    assert (below.outcome, above.outcome) == ("failed", "inconclusive")


def test_one_slow_probe_with_no_stream_queued_is_still_a_pause() -> None:
    result = verdict(measured(6, slowest_probe=4.2), MAX_PROBE_S)
    assert result.outcome == "inconclusive"


def test_one_probe_held_for_most_of_the_run_is_a_blocked_loop() -> None:
    """On the engine a blocking proxy held one probe from the first stream to the last (6,746 of
    7,283 ms), while the three others, before and after, answered at once (median 41 ms): the
    median alone took it for a pause of the machine."""
    done = [Capture("http://proxy", terminal="done", total_time=7.2)] * 4
    engine = Measured(4, done, [0.001] * 5, [0.02, 6.746, 0.041, 0.05], 7.283)
    result = verdict(engine, ENGINE_MAX_PROBE_S)
    assert result.outcome == "failed"
    assert result.verdict.startswith("the proxy stops answering while it waits on the upstream")


def test_two_probes_held_one_after_the_other_for_most_of_the_run_are_a_blocked_loop() -> None:
    """On the engine the blocking proxy sometimes lets go of its loop for a moment mid-run: the
    held probe returns and the next one is held in turn. Seen in the nineteenth session: 2,927
    and 2,999 ms of 6,555 ms (and 4,514 and 1,516 of 6,641), each under three quarters of the
    run, together 90 % of it; one grading in four or five came out inconclusive that way."""
    done = [Capture("http://proxy", terminal="done", total_time=6.5)] * 4
    engine = Measured(4, done, [0.001] * 5, [0.016, 2.927, 2.999, 0.037, 0.035], 6.555)
    result = verdict(engine, ENGINE_MAX_PROBE_S)
    assert result.outcome == "failed"
    assert result.verdict.startswith("the proxy stops answering while it waits on the upstream")


def test_probes_under_the_limit_count_nothing_toward_the_held_share() -> None:
    """Only probes over the limit are held: a correct proxy's many fast probes add up to much
    of a run without being a block."""
    done = [Capture("http://proxy", terminal="done", total_time=6.5)] * 4
    fast = [0.06] * 60  # 3.6 s of a 5 s run, each under the limit (and the 75 ms median line)
    slow_once = Measured(4, done, [0.001] * 5, [*fast, ENGINE_MAX_PROBE_S + 0.1], 5.0)
    assert verdict(slow_once, ENGINE_MAX_PROBE_S).outcome == "inconclusive"


def test_the_held_share_is_three_quarters_of_the_experiment() -> None:
    elapsed = measured(6).elapsed

    def judged(slowest: float) -> str:
        return verdict(measured(6, slowest_probe=slowest), MAX_PROBE_S).outcome

    assert judged(HELD_SHARE * elapsed - 0.01) == "inconclusive"
    assert judged(HELD_SHARE * elapsed + 0.01) == "failed"


def test_a_blocked_loop_is_named_before_the_pool() -> None:
    blocked = Measured(6, [], [0.002] * 5, [2.0] * 20, 8.0, 1, 0)
    result = verdict(blocked, MAX_PROBE_S)
    assert result.verdict.startswith("the proxy stops answering while it waits on the upstream")


def test_every_stream_together_passes_and_an_engine_run_has_no_count() -> None:
    assert verdict(measured(6), MAX_PROBE_S).passed
    engine = verdict(measured(None), MAX_PROBE_S)
    assert engine.passed and "reached_upstream_together" not in engine.evidence
