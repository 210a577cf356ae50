"""Pictures of captured streams: token timelines, gaps between content events, cancellation.

Each plot counts one thing and says which in its labels: tokens (``Capture.token_counts``, the
unit the mock's records and the usage counts use) or content events (``Capture.token_times``,
one per SSE event that carries text, which may hold several tokens). Lines that are compared
with each other count the same thing.

Each function draws on ``ax`` if given, otherwise on a new pyplot figure (so a notebook cell
ending in ``plt.show()`` displays it), and returns the figure. None of them saves a file or
calls ``show``. matplotlib is imported when a plot is first drawn, not with labkit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from labkit.capture import Capture

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_cancellation", "plot_gaps", "plot_timeline", "slope_guides"]

_SIZE = (7.0, 3.6)
_TIME_LABEL = "seconds since the request was sent"
_GUIDE_STYLES: dict[float, str] = {1: ":", 2: "--"}  # any other slope: "-."


def _axes(ax: Axes | None) -> tuple[Figure, Axes]:
    if ax is None:
        import matplotlib.pyplot as plt

        fig, new_ax = plt.subplots(figsize=_SIZE, layout="constrained")
        return fig, new_ax
    return ax.get_figure(root=True), ax  # type: ignore[return-value]


def _tokens_over_time(capture: Capture) -> tuple[list[float], list[int]]:
    """(times, tokens received by then), starting at (0, 0): the client's line in tokens.

    Raises ``ValueError`` for a capture without ``token_counts`` (one built by hand), rather
    than drawing its events as if each were one token.
    """
    if len(capture.token_counts) != len(capture.token_times):
        raise ValueError(
            f"expected a token count for each of the capture's {len(capture.token_times)} "
            f"content events, got {len(capture.token_counts)}: use a capture from "
            "capture_stream(), or set its token_counts"
        )
    return [0.0, *capture.token_times], [0, *capture.token_counts]


def plot_timeline(captures: Mapping[str, Capture], ax: Axes | None = None) -> Figure:
    """Tokens received against time, one line per capture (e.g. direct / proxied / buffered).

    A dot marks each capture's first content event; a dotted line marks a deliberate
    disconnect.
    """
    fig, ax = _axes(ax)
    for name, capture in captures.items():
        times, counts = _tokens_over_time(capture)
        if capture.total_time > times[-1]:
            times.append(capture.total_time)
            counts.append(counts[-1])
        (line,) = ax.step(times, counts, where="post", label=name)
        if capture.ttft is not None:
            ax.plot([capture.ttft], [counts[1]], "o", color=line.get_color())
        if capture.disconnected_at is not None:
            ax.axvline(capture.disconnected_at, color=line.get_color(), linestyle=":")
    ax.set_xlabel(_TIME_LABEL)
    ax.set_ylabel("tokens received")
    ax.set_title("Tokens received over time")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    if captures:
        ax.legend(loc="upper left")
    return fig


def plot_gaps(captures: Mapping[str, Capture], ax: Axes | None = None) -> Figure:
    """The wait before each content event (ms) against its position, one line per capture.

    A trickling stream is a flat line at the interval between events; a buffered one is one
    tall spike (the wait for everything) and then zeros.
    """
    fig, ax = _axes(ax)
    for name, capture in captures.items():
        gaps_ms = [capture.ttft * 1000] if capture.ttft is not None else []
        gaps_ms += [gap * 1000 for gap in capture.gaps]
        ax.plot(range(1, len(gaps_ms) + 1), gaps_ms, marker="o", markersize=3, label=name)
    ax.set_xlabel("content event (1 = the first, its wait is the TTFT)")
    ax.set_ylabel("wait before the event (ms)")
    ax.set_title("Gaps between content events")
    ax.set_ylim(bottom=0)
    if captures:
        ax.legend(loc="upper right")
    return fig


def plot_cancellation(
    capture: Capture, record: Mapping[str, Any], ax: Axes | None = None
) -> Figure:
    """What the upstream generated vs what the client saw, around the client's disconnect.

    ``record`` is the mock's record of the same request (``MockUpstream(...).last()``). Both
    lines count tokens. The upstream's runs from its first token to its end at its average
    pace (the record keeps counts and times, not every token); the client's is the tokens the
    capture received, so with a correct proxy the two meet at the hang-up.
    """
    fig, ax = _axes(ax)

    def since_start(key: str) -> float | None:
        value = record.get(key)
        return None if value is None else float(value) - capture.started_at

    generated = int(record.get("tokens_generated") or 0)
    first, ended = since_start("first_token_at"), since_start("ended_at")
    if first is not None and generated > 0:
        end = ended if ended is not None else capture.total_time
        ax.plot([0, first, end], [0, 1, generated], label="generated by the upstream")
    else:
        ax.plot([0], [0], label="generated by the upstream (nothing)")
    times, counts = _tokens_over_time(capture)
    ax.step(times, counts, where="post", label="received by the client")
    if capture.disconnected_at is not None:
        ax.axvline(capture.disconnected_at, color="black", linestyle=":", label="client hung up")
    noticed = since_start("disconnected_at")
    if noticed is not None:
        ax.axvline(noticed, color="tab:red", linestyle="--", label="upstream noticed")
    after = record.get("tokens_after_disconnect")
    title = "Cancellation"
    if after is not None:
        title += f": {after} token(s) generated after the client left"
    ax.set_title(title)
    ax.set_xlabel(_TIME_LABEL)
    ax.set_ylabel("tokens")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    return fig


def slope_guides(
    ax: Axes,
    x: Sequence[float],
    y: Sequence[float],
    slopes: Sequence[float] = (1, 2),
    labels: Mapping[float, str] | None = None,
) -> list[Any]:
    """Dashed reference lines of the given slopes on a log-log ``ax``, through the first point.

    On log-log axes a line of slope k is y proportional to x**k: slope 1 is linear growth (O(n)),
    slope 2 quadratic (O(n**2)). Each guide starts at ``(x[0], y[0])`` and spans ``x``, so a
    measured line that runs parallel to a guide grows at that rate, whatever its constant. The
    guides are labelled ``slope k`` (or ``labels[k]``) for the legend. Returns the lines drawn.
    """
    if len(x) < 2 or len(x) != len(y) or min(*x, *y) <= 0:
        raise ValueError(
            f"expected two or more positive points with as many x as y, got x={list(x)} "
            f"y={list(y)}: slope guides need points a log-log plot can draw"
        )
    x0, x1, y0 = float(x[0]), float(max(x)), float(y[0])
    drawn = []
    for slope in slopes:
        label = (labels or {}).get(slope, f"slope {slope:g}")
        (line,) = ax.plot(
            [x0, x1],
            [y0, y0 * (x1 / x0) ** slope],
            linestyle=_GUIDE_STYLES.get(slope, "-."),
            color="grey",
            linewidth=1.0,
            label=label,
        )
        drawn.append(line)
    return drawn
