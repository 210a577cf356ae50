"""``trickle`` judges what it saw, in process: a proxy that batches its sends every 200 ms passes
with a warning that it batches them; evenly arriving tokens, or a machine's one pause, pass with
none; a proxy that holds everything to the end fails, with no warning. Each bound (``BATCH_GAP``
token intervals, ``BATCHED_SHARE`` of the events in groups) is tested a little either side.
(The experiment runs over real sockets in tests/grading/test_trickle_batching.py.)"""

from __future__ import annotations

import pytest

from labkit.capture import Capture
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.trickle import BATCH_GAP, BATCHED, BATCHED_SHARE, Observed, judge

ONE_CPU = Budget(cpus=1.0)
INTERVAL = 0.05  # the mock's 20 tokens/s
TOKENS = 40
FIRST = 0.2  # when the upstream made its first token
PRODUCED = (FIRST, FIRST + (TOKENS - 1) * INTERVAL)


def _judged(gaps: list[float]) -> CheckResult:
    """The verdict for one-token events arriving ``gaps`` apart, the first a ms after it was
    made (times are seconds since the request, ``Capture.started_at`` = 0)."""
    times = [FIRST + 0.001]
    for gap in gaps:
        times.append(times[-1] + gap)
    capture = Capture("http://proxy/v1/chat/completions", status=200, token_times=times)
    capture.token_counts = list(range(1, len(times) + 1))
    return judge(Observed(capture, PRODUCED), ONE_CPU)


def _pairs(between: float, count: int) -> list[float]:
    """``count`` pairs of events arriving together, ``between`` apart."""
    return [0.0, between] * (count - 1) + [0.0]


def test_evenly_arriving_tokens_pass_without_a_warning() -> None:
    judged = _judged([INTERVAL] * (TOKENS - 1))
    assert judged.passed and judged.warning == ""
    assert judged.evidence["client_groups"] == 0


@pytest.mark.parametrize(
    ("gap_intervals", "warned"), [(BATCH_GAP - 0.1, False), (BATCH_GAP + 0.1, True)]
)
def test_groups_are_a_batching_only_with_gaps_longer_than_the_bound(
    gap_intervals: float, warned: bool
) -> None:
    judged = _judged(_pairs(gap_intervals * INTERVAL, TOKENS // 2))
    assert judged.passed
    assert judged.evidence["grouped_share"] == 1.0
    assert judged.warning == (BATCHED if warned else "")


@pytest.mark.parametrize(("pairs", "warned"), [(9, False), (10, True)])
def test_long_gaps_are_a_batching_only_when_most_events_arrive_in_groups(
    pairs: int, warned: bool
) -> None:
    """Half the events in pairs (10 of 20: the bound) or a little fewer, then one long gap and
    the rest trickling in."""
    assert BATCHED_SHARE == 0.5
    grouped = _pairs(2 * INTERVAL, pairs)
    gaps = [*grouped, 4 * INTERVAL, *[INTERVAL] * (TOKENS - 2 * pairs - 1)]
    judged = _judged(gaps)
    assert judged.passed and judged.evidence["grouped_share"] == 2 * pairs / TOKENS
    assert judged.warning == (BATCHED if warned else "")


def test_a_pause_of_a_loaded_machine_is_no_batching() -> None:
    """Half a second of nothing, then ten events at once: a long gap, but no pattern."""
    gaps = [*[INTERVAL] * 10, 0.5, *[0.0] * 9, *[INTERVAL] * 19]
    judged = _judged(gaps)
    assert judged.passed and judged.warning == ""


def test_everything_at_the_end_still_fails_without_a_warning() -> None:
    capture = Capture("http://proxy", status=200, token_times=[PRODUCED[1] + 0.001] * TOKENS)
    capture.token_counts = list(range(1, TOKENS + 1))
    judged = judge(Observed(capture, PRODUCED), ONE_CPU)
    assert not judged.passed and judged.warning == ""
    assert judged.verdict.startswith("tokens arrive in a burst at the end")
