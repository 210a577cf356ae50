"""``stream_shape`` names a stream's shape by the ``trickle`` check's own rule: the check and the
notebooks read one MIN_SPREAD, and a spread the check passes is one the notebooks call
"trickles", a little less one it fails and they do not."""

from __future__ import annotations

import pytest

from labkit import stream_shape
from labkit.capture import Capture
from labkit.checks import trickle
from labkit.checks.machine import Budget
from labkit.shape import BURST_SPREAD, MIN_SPREAD, generation_s

SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 41}  # 40 intervals of 50 ms: a 2 s generation
GENERATION = 2.0


def _times(spread: float, count: int = 20) -> list[float]:
    """``count`` arrivals spread evenly over ``spread`` seconds, from 0.2 s on."""
    return [0.2 + spread * n / (count - 1) for n in range(count)]


def _trickle_passes(times: list[float]) -> bool:
    """The ``trickle`` check's verdict on these arrivals, the first token arriving a ms after the
    upstream made it and the upstream generating for GENERATION seconds."""
    capture = Capture("http://proxy/v1/chat/completions", status=200, token_times=times)
    capture.token_counts = list(range(1, len(times) + 1))
    produced = (times[0] - 0.001, times[0] - 0.001 + GENERATION)
    return trickle.judge(trickle.Observed(capture, produced), Budget(cpus=1.0)).passed


def test_the_trickle_check_reads_the_same_bounds() -> None:
    assert trickle.MIN_SPREAD is MIN_SPREAD
    assert generation_s(SCENARIO) == pytest.approx(GENERATION)


@pytest.mark.parametrize("ratio", [MIN_SPREAD + 0.01, MIN_SPREAD - 0.01, 1.0, 0.2])
def test_trickles_exactly_when_the_trickle_check_passes(ratio: float) -> None:
    times = _times(ratio * GENERATION)
    assert (stream_shape(times, SCENARIO) == "trickles") is _trickle_passes(times)


@pytest.mark.parametrize(
    ("ratio", "shape"),
    [
        (1.0, "trickles"),
        (MIN_SPREAD, "trickles"),
        (MIN_SPREAD - 0.01, "unclear"),
        (BURST_SPREAD, "unclear"),
        (BURST_SPREAD - 0.01, "one burst"),
        (0.0, "one burst"),
    ],
)
def test_each_bound_a_little_either_side(ratio: float, shape: str) -> None:
    assert stream_shape(_times(ratio * GENERATION), SCENARIO) == shape


@pytest.mark.parametrize("times", [[], [0.4]])
def test_fewer_than_two_pieces_is_nothing_arrived(times: list[float]) -> None:
    assert stream_shape(times, SCENARIO) == "nothing arrived"
