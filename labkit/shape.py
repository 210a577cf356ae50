"""The shape of a stream in time: did its pieces trickle, or land in one burst?

The rule is the ``trickle`` check's, written once here so the check and the notebooks cannot
drift apart (``labkit.checks.trickle`` imports its bounds from this module). Tokens trickle when
they span at least MIN_SPREAD of the upstream's generation time (first token to last); a proxy
that forwards them spans all of it, one that buffers a few milliseconds. The check also bounds
the first token's lag (MAX_FIRST_LAG), which needs the upstream's own clock; a notebook that has
only the client's times reads the spread.

``stream_shape`` gives that verdict in words from the client's arrival times and the mock's
scenario (its ``tokens`` at ``tps`` per second). Below BURST_SPREAD of the generation time the
pieces landed together ("one burst"); between the two bounds the verdict is "unclear", a gap
wide enough that a slow or loaded machine moves no stream from one named shape to the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

__all__ = ["BURST_SPREAD", "MAX_FIRST_LAG", "MIN_SPREAD", "Shape", "generation_s", "stream_shape"]

MIN_SPREAD = 0.5  # of the upstream's generation time: tokens spanning this much trickled
MAX_FIRST_LAG = 0.5  # of the upstream's generation time: the first token's allowed lag
BURST_SPREAD = 0.1  # of the upstream's generation time: pieces within this landed together

Shape = Literal["trickles", "one burst", "unclear", "nothing arrived"]


def generation_s(scenario: Mapping[str, float]) -> float:
    """The mock's generation time for ``scenario``, first token to last: ``tokens - 1``
    intervals of ``1 / tps`` seconds."""
    return (scenario["tokens"] - 1) / scenario["tps"]


def stream_shape(times: Sequence[float], scenario: Mapping[str, float]) -> Shape:
    """'trickles', 'one burst', 'unclear' or 'nothing arrived', from the arrival times of a
    stream's pieces (seconds, any origin) and the mock ``scenario`` that paced it: the pieces
    trickled when they span at least MIN_SPREAD of its generation time (the ``trickle``
    check's rule) and landed in one burst when they span less than BURST_SPREAD of it."""
    if len(times) < 2:
        return "nothing arrived"
    spread = max(times) - min(times)
    generation = generation_s(scenario)
    if spread >= MIN_SPREAD * generation:
        return "trickles"
    if spread < BURST_SPREAD * generation:
        return "one burst"
    return "unclear"
