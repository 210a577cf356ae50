"""Pure figures computed from what the load generator saw. No I/O, no clocks.

Times are seconds unless a name ends in ``_ms``. "Added" figures subtract the direct path's
figure measured on the same run, so a noisy machine moves both sides together.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Every load shape paces the mock at this rate: 20 tokens/s per stream, a fast chat model.
TOKENS_PER_S = 20.0
# A stream's chunks are "batched" when the median gap between content chunks is below this
# fraction of the upstream's interval between tokens: several chunks arrived in one burst.
BATCHED_FRACTION = 0.25
# Added p99 inter-token latency a configuration may show and still count as sustaining a level.
SUSTAIN_ADDED_ITL_MS = 10.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 ≤ q ≤ 1) by linear interpolation; NaN for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"expected a quantile between 0 and 1, got {q!r}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval_errors(frames: Sequence[tuple[float, int]], tps: float) -> list[float]:
    """For each pair of consecutive frames ``(arrival, tokens so far)`` of one stream, how far
    the measured gap is from the gap a ``tps`` schedule promises for the later frame's tokens
    (absolute, seconds)."""
    return [abs((t1 - t0) - (n1 - n0) / tps) for (t0, n0), (t1, n1) in itertools.pairwise(frames)]


def paired_added(
    through: Mapping[str, float], floor: Mapping[str, float]
) -> tuple[float, float, int]:
    """(p50, p99, n) of what a configuration added to each request, in the unit of the times
    given: its time for a seed minus the direct path's time for the same seed, over the seeds
    both runs measured.

    The mock's first token is not one time but several (a first chunk of one, two or three
    tokens is due after 20, 70 or 120 ms at 20 tokens/s), so the floor is a mixture, and the
    difference of two mixtures' p50s swings by tens of ms when a run's share of one mode is near
    one half. The same seed asks for the same answer, so the difference per request is the cost
    of the configuration alone."""
    common = floor.keys() & through.keys()
    added = [through[seed] - floor[seed] for seed in common]
    return percentile(added, 0.5), percentile(added, 0.99), len(added)


@dataclass(frozen=True)
class Summary:
    """p50 / p99 / max of a sample, in milliseconds."""

    n: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Summary:
        return cls(
            n=len(seconds),
            p50_ms=percentile(seconds, 0.5) * 1000,
            p99_ms=percentile(seconds, 0.99) * 1000,
            max_ms=max(seconds, default=math.nan) * 1000,
        )


def is_batched(gaps: Sequence[float], interval: float) -> bool:
    """True when chunks arrive in bursts: median gap ≪ the upstream's interval between tokens."""
    if not gaps:
        return False
    return statistics.median(gaps) < BATCHED_FRACTION * interval


def added(value: float, floor: float) -> float:
    """``value - floor`` (NaN stays NaN): the cost a configuration adds over the direct path."""
    return value - floor


def ratio(value: float, base: float) -> float:
    """``value / base``, NaN when the base is zero, negative or unknown."""
    if math.isnan(value) or math.isnan(base) or base <= 0:
        return math.nan
    return value / base


# A proxy sustains a level only if it also completes nearly as many streams as the direct path
# did at that level (a full connection pool keeps the gaps fine but makes streams queue).
SUSTAIN_THROUGHPUT = 0.95


def level_sustained(
    level: Mapping[str, Any],
    floor_p99_itl_ms: float,
    budget_ms: float = SUSTAIN_ADDED_ITL_MS,
    direct_completed: int | None = None,
) -> bool:
    """A level holds when every stream completed, p99 ITL stays within ``budget_ms`` of the
    floor (the direct path at the same level, or at its lightest level for the direct path),
    and, for a proxy, it completed ≥ 95% of the streams the direct path completed there."""
    if direct_completed and level["completed"] < SUSTAIN_THROUGHPUT * direct_completed:
        return False
    return bool(
        level["completed"] == level["streams"]
        and level["failed"] == 0
        and level["itl"]["p99_ms"] - floor_p99_itl_ms <= budget_ms
    )


def max_sustained(
    rows: Sequence[Mapping[str, Any]], direct_rows: Sequence[Mapping[str, Any]]
) -> int:
    """The highest level reached without a failed level before it (0 if the first fails).
    ``direct_rows`` are the direct path's rows of the same run (its own floor for itself)."""
    direct = {row["level"]: row for row in direct_rows}
    lightest = min(direct, default=None)
    best = 0
    for row in sorted(rows, key=lambda r: r["level"]):
        same = direct.get(row["level"])
        if rows is direct_rows or same is None:
            floor = direct[lightest]["itl"]["p99_ms"] if lightest is not None else math.nan
            held = level_sustained(row, floor)
        else:
            held = level_sustained(row, same["itl"]["p99_ms"], direct_completed=same["completed"])
        if not held:
            break
        best = row["level"]
    return best


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    """A number for a table cell: ``–`` for unknown, else rounded with its unit."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}{unit}"


def fmt_ratio(value: float | None) -> str:
    """A ratio for a table cell: ``×1.3``, or ``–``."""
    if value is None or math.isnan(value):
        return "–"
    return f"×{value:.2f}" if value < 10 else f"×{value:.0f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table; the first column left-aligned, the rest right."""
    align = [":---"] + ["---:"] * (len(header) - 1)
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
