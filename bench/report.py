"""Turn a run's figures into ratios, a goals verdict, a markdown table, JSON and PNG plots.

Everything here is a function of the :class:`~bench.runner.Result` dictionary; only
:func:`write` touches the disk (``bench/results/``, gitignored). Plots use matplotlib's Agg
backend and are written as PNG files, never shown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import stats
from bench.stats import fmt, fmt_ratio, markdown_table, ratio

RESULTS = Path(__file__).resolve().parent / "results"
NAN = math.nan

# What a streaming proxy should cost, at most (README, "Benchmarks"): the goals judged for the
# configurations in GOAL_CONFIGS.
GOAL_ADDED_TTFT_P50_MS = 2.0
GOAL_ADDED_TTFT_P99_MS = 20.0
GOAL_BURST_VS_NGINX = 2.0
GOAL_CAPACITY_RATIO = 0.9
GOAL_ADDED_ITL_P99_MS = 10.0
GOAL_IDLE_KIB = 64.0
NOISE_MS = 1.0  # added times below this are within the rig's noise


def _get(figures: Mapping[str, Any], *path: str) -> float:
    node: Any = figures
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return NAN
        node = node[key]
    return float(node) if isinstance(node, int | float) else NAN


def _steady_added(figures: Mapping[str, Any], direct: Mapping[str, Any]) -> tuple[float, float]:
    """Added steady TTFT p50 and p99 (ms): per request against direct's same seed
    (:func:`bench.stats.paired_added`), or, for results saved before seeds were kept, the
    difference of the two runs' percentiles."""
    through = figures.get("steady", {}).get("ttft_by_seed_ms")
    floor = direct.get("steady", {}).get("ttft_by_seed_ms")
    if through and floor:
        p50, p99, n = stats.paired_added(through, floor)
        if n:
            return p50, p99
    return (
        _get(figures, "steady", "ttft", "p50_ms") - _get(direct, "steady", "ttft", "p50_ms"),
        _get(figures, "steady", "ttft", "p99_ms") - _get(direct, "steady", "ttft", "p99_ms"),
    )


def derived(result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per configuration: added figures over direct and ratios to direct and nginx."""
    configs = result["configs"]
    direct = configs.get("direct", {})
    direct_rows = direct.get("capacity", [])
    nginx = configs.get("nginx", {})
    out: dict[str, dict[str, float]] = {}
    for name, figures in configs.items():
        steady_p50, steady_p99 = _steady_added(figures, direct)
        row = {
            "steady_ttft_p50_added_ms": steady_p50,
            "steady_ttft_p99_added_ms": steady_p99,
            "burst_ttft_p50_added_ms": _get(figures, "burst", "ttft", "p50_ms")
            - _get(direct, "burst", "ttft", "p50_ms"),
            "burst_ttft_p99_added_ms": _get(figures, "burst", "ttft", "p99_ms")
            - _get(direct, "burst", "ttft", "p99_ms"),
            "itl_p99_added_ms": _get(figures, "steady", "itl", "p99_ms")
            - _get(direct, "steady", "itl", "p99_ms"),
            "max_sustained": float(stats.max_sustained(figures["capacity"], direct_rows))
            if figures.get("capacity")
            else NAN,
        }
        nginx_burst_added = _get(nginx, "burst", "ttft", "p50_ms") - _get(
            direct, "burst", "ttft", "p50_ms"
        )
        row["nginx_burst_added_ms"] = nginx_burst_added
        row["capacity_ratio"] = ratio(
            row["max_sustained"],
            float(stats.max_sustained(direct_rows, direct_rows)) if direct_rows else NAN,
        )
        # nginx often adds nothing in a burst (its upstream connections are kept alive, so the
        # mock accepts fewer): below NOISE_MS a ratio of added times means nothing, so the goal
        # uses max(nginx's added, NOISE_MS), and the absolute ratio is shown beside it.
        row["burst_vs_nginx"] = ratio(
            row["burst_ttft_p50_added_ms"],
            max(nginx_burst_added, NOISE_MS) if not math.isnan(nginx_burst_added) else NAN,
        )
        row["burst_abs_vs_nginx"] = ratio(
            _get(figures, "burst", "ttft", "p50_ms"), _get(nginx, "burst", "ttft", "p50_ms")
        )
        row["steady_vs_nginx"] = ratio(
            row["steady_ttft_p50_added_ms"], _steady_added(nginx, direct)[0]
        )
        row["request_cpu_ms"] = _get(figures, "burst", "cpu_ms_per_request")
        row["cpu_vs_nginx"] = ratio(
            _get(figures, "steady", "cpu_s_per_1000_chunks"),
            _get(nginx, "steady", "cpu_s_per_1000_chunks"),
        )
        out[name] = row
    return out


def table(result: Mapping[str, Any]) -> str:
    """The README's table: one row per configuration, absolutes with ratios beside them."""
    extra = derived(result)
    header = [
        "configuration",
        "steady: added TTFT p50 / p99 ms",
        "burst: added TTFT p50 ms (abs. ×nginx)",
        "added ITL p99 ms",
        "batched",
        "max streams @20 tok/s (×direct)",
        "CPU s / 1k chunks (×nginx)",
        "KiB / idle stream (open)",
        "slow readers: growth MiB",
    ]
    rows = []
    for name, figures in result["configs"].items():
        d = extra[name]
        steady = figures.get("steady", {})
        if name == "direct":
            ttft = (
                f"floor {fmt(_get(figures, 'steady', 'ttft', 'p50_ms'))} / "
                f"{fmt(_get(figures, 'steady', 'ttft', 'p99_ms'))}"
            )
            burst = f"floor {fmt(_get(figures, 'burst', 'ttft', 'p50_ms'))}"
            itl = f"floor {fmt(_get(figures, 'steady', 'itl', 'p99_ms'))}"
        else:
            ttft = f"{fmt(d['steady_ttft_p50_added_ms'])} / {fmt(d['steady_ttft_p99_added_ms'])}"
            burst = f"{fmt(d['burst_ttft_p50_added_ms'])} ({fmt_ratio(d['burst_abs_vs_nginx'])})"
            itl = fmt(d["itl_p99_added_ms"])
        batched = "–" if not steady else ("yes" if steady.get("batched") else "no")
        if steady.get("batched_streams"):
            batched += f" ({steady['batched_streams']} streams)"
        if steady and steady.get("failed"):
            batched += f", {steady['failed']} failed"
        capacity = _capacity_cell(figures, d["max_sustained"], d["capacity_ratio"])
        cpu = _get(figures, "steady", "cpu_s_per_1000_chunks")
        cpu_cell = (
            f"{fmt(cpu, 3)} (mock)"
            if name == "direct"
            else f"{fmt(cpu, 3)} ({fmt_ratio(d['cpu_vs_nginx'])})"
        )
        idle = figures.get("idle")
        idle_cell = (
            f"{fmt(idle['kib_per_stream'])} ({idle['open']}/{idle['requested']})" if idle else "–"
        )
        slow = figures.get("slow")
        slow_cell = (
            f"{fmt(slow['grown_mib'])} ({'bounded' if slow['bounded'] else 'GROWING'})"
            if slow
            else "–"
        )
        label = name + (" (mock)" if name == "direct" and idle else "")
        rows.append([label, ttft, burst, itl, batched, capacity, cpu_cell, idle_cell, slow_cell])
    return markdown_table(header, rows)


def _capacity_cell(figures: Mapping[str, Any], best: float, capacity_ratio: float) -> str:
    if math.isnan(best):
        return "–"
    cell = f"{best:.0f}"
    top = max(row["level"] for row in figures["capacity"])
    if best == top and figures.get("capacity_capped_by_plan"):
        cell = f"≥{cell}"
    return f"{cell} ({fmt_ratio(capacity_ratio)})"


@dataclass(frozen=True)
class Goal:
    text: str
    measured: str
    met: bool | None  # None: not measured in this run


# The configurations the goals are judged for: the reference the notebooks teach, and the
# reference to deploy (solutions.aiohttp_proxy) on asyncio and on uvloop.
GOAL_CONFIGS = ("reference", "aiohttp", "aiohttp-uvloop")


def goals(result: Mapping[str, Any], name: str = "reference") -> list[Goal]:
    """The bench's goals, met or missed by one configuration (the reference by default)."""
    figures = result["configs"].get(name)
    if figures is None:
        return []
    d = derived(result)[name]
    direct = derived(result).get("direct", {})
    steady = figures.get("steady", {})

    def check(value: float, limit: float) -> bool | None:
        return None if math.isnan(value) else value <= limit

    p50, p99 = d["steady_ttft_p50_added_ms"], d["steady_ttft_p99_added_ms"]
    out = [
        Goal(
            f"steady {result.get('plan', {}).get('steady_streams', '?')} streams: added TTFT p50 ≤ "
            f"{GOAL_ADDED_TTFT_P50_MS:g} ms",
            f"{fmt(p50)} ms",
            check(p50, GOAL_ADDED_TTFT_P50_MS),
        ),
        Goal(
            f"steady: added TTFT p99 ≤ {GOAL_ADDED_TTFT_P99_MS:g} ms",
            f"{fmt(p99)} ms",
            check(p99, GOAL_ADDED_TTFT_P99_MS),
        ),
        Goal(
            "steady: no batching, no failures",
            f"median gap {fmt(_get(figures, 'steady', 'median_gap_ms'))} ms, "
            f"{steady.get('failed', '?')} failed",
            None if not steady else (not steady.get("batched") and not steady.get("failed")),
        ),
        Goal(
            f"burst: added TTFT p50 ≤ {GOAL_BURST_VS_NGINX:g}× nginx's",
            f"{fmt(d['burst_ttft_p50_added_ms'])} ms against nginx's "
            f"{fmt(d['nginx_burst_added_ms'])} ms (counted as ≥ {NOISE_MS:g} ms): "
            f"{fmt_ratio(d['burst_vs_nginx'])}; absolute p50 {fmt_ratio(d['burst_abs_vs_nginx'])}; "
            f"CPU per request {fmt(d['request_cpu_ms'], 2)} ms "
            f"(nginx {fmt(derived(result).get('nginx', {}).get('request_cpu_ms', NAN), 2)})",
            check(d["burst_vs_nginx"], GOAL_BURST_VS_NGINX),
        ),
        Goal(
            f"sustains ≥ {GOAL_CAPACITY_RATIO:.0%} of direct's streams (added ITL p99 ≤ "
            f"{GOAL_ADDED_ITL_P99_MS:g} ms)",
            f"{fmt(d['max_sustained'], 0)} of {fmt(direct.get('max_sustained', NAN), 0)}",
            None if math.isnan(d["capacity_ratio"]) else d["capacity_ratio"] >= GOAL_CAPACITY_RATIO,
        ),
    ]
    idle = figures.get("idle")
    out.append(
        Goal(
            f"≤ {GOAL_IDLE_KIB:g} KiB per idle stream",
            f"{fmt(idle['kib_per_stream'])} KiB over {idle['open']} of {idle['requested']} open"
            if idle
            else "–",
            None
            if not idle
            else (idle["open"] == idle["requested"] and idle["kib_per_stream"] <= GOAL_IDLE_KIB),
        )
    )
    slow = figures.get("slow")
    out.append(
        Goal(
            "memory bounded with slow readers",
            f"grew {fmt(slow['grown_mib'])} MiB, {fmt(slow['second_half_growth_mib'])} MiB in the "
            "second half"
            if slow
            else "–",
            None if not slow else bool(slow["bounded"]),
        )
    )
    return out


def goals_text(result: Mapping[str, Any], name: str = "reference") -> str:
    marks = {True: "met   ", False: "MISSED", None: "n/a   "}
    return "\n".join(f"  {marks[g.met]} {g.text}: {g.measured}" for g in goals(result, name))


def loadavg_text(result: Mapping[str, Any]) -> str:
    loads = result.get("loadavg", [])
    if not loads:
        return ""
    peak = max(entry["1m"] for entry in loads)
    cpus = result["machine"]["cpus"]
    return (
        f"load average (1 min) during the run: {loads[0]['1m']:.2f} at start, peak {peak:.2f}, "
        f"{loads[-1]['1m']:.2f} at end, on {cpus} CPUs"
    )


# -- files ------------------------------------------------------------------------------------
def write(result: Mapping[str, Any], stem: str, directory: Path = RESULTS) -> list[Path]:
    """JSON (figures + derived + goals) and the PNG plots; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        **result,
        "derived": derived(result),
        "goals": {
            name: [g.__dict__ for g in goals(result, name)]
            for name in GOAL_CONFIGS
            if name in result["configs"]
        },
        "table_markdown": table(result),
    }
    json_path = directory / f"{stem}.json"
    json_path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return [json_path, *plots(result, directory, stem)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"cannot store {type(value).__name__} in the results JSON")


def plots(result: Mapping[str, Any], directory: Path, stem: str) -> list[Path]:
    # a bare Figure draws with the Agg canvas and leaves pyplot's backend alone
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    written: list[Path] = []
    configs = result["configs"]
    extra = derived(result)
    names = [n for n in configs if n != "direct"]
    if names:
        fig = Figure(figsize=(9, 4))
        ax = fig.subplots()
        keys = [
            ("steady_ttft_p50_added_ms", "steady p50"),
            ("steady_ttft_p99_added_ms", "steady p99"),
            ("burst_ttft_p50_added_ms", "burst p50"),
        ]
        width = 0.8 / len(keys)
        for i, (key, label) in enumerate(keys):
            values = [max(extra[n][key], 0.01) for n in names]
            ax.bar([x + i * width for x in range(len(names))], values, width, label=label)
        ax.set_xticks([x + width for x in range(len(names))], names, rotation=20, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("added TTFT over direct (ms, log)")
        ax.set_title("What each proxy adds to time to first token")
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, directory / f"{stem}-ttft.png"))
    if any("capacity" in f for f in configs.values()):
        fig = Figure(figsize=(12, 4.5))
        gaps, ttft = fig.subplots(1, 2)
        colours = [colormaps["tab20"](i) for i in range(20)]
        for i, (name, figures) in enumerate(configs.items()):
            rows = figures.get("capacity", [])
            if rows:
                levels = [r["level"] for r in rows]
                style = {"color": colours[i % len(colours)], "label": name}
                gaps.plot(levels, [r["itl"]["p99_ms"] for r in rows], "o-", **style)
                ttft.plot(levels, [r["ttft"]["p50_ms"] for r in rows], "o-", **style)
        gaps.set_ylabel("p99 inter-token gap (ms)")
        gaps.set_title("Gaps (the upstream's chunks are 50-150 ms apart)")
        ttft.set_ylabel("TTFT p50 (ms, log)")
        ttft.set_yscale("log")
        ttft.set_title("Time to first token (a full pool makes streams queue)")
        for ax in (gaps, ttft):
            ax.set_xlabel("concurrent streams at 20 tokens/s")
        ttft.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, directory / f"{stem}-capacity.png"))
    if any("slow" in f for f in configs.values()):
        fig = Figure(figsize=(8, 4))
        ax = fig.subplots()
        for name, figures in configs.items():
            slow = figures.get("slow")
            if slow and slow["samples"]:
                ax.plot(
                    [s[0] for s in slow["samples"]],
                    [s[1] / 2**20 for s in slow["samples"]],
                    label=f"{name} (the mock's RSS)" if slow.get("metered") == "mock" else name,
                )
        ax.set_xlabel("seconds since the slow readers connected")
        ax.set_ylabel("RSS growth of the proxy (MiB)")
        ax.set_title("Slow readers: a bounded proxy levels off")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, directory / f"{stem}-memory.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    return path
