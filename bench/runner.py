"""One benchmark run: start the mock and every configuration, drive each load shape through each
configuration in turn, and collect raw figures (the report turns them into ratios and plots).

Phases (sizes from :class:`Plan`; ``--quick`` shrinks them):

1. ``steady`` -- closed loop of N streams; TTFT, inter-token gaps, batching, CPU per chunk;
2. ``burst`` -- N streams at the same instant; TTFT;
3. ``capacity`` -- steady runs at rising levels; the direct path's ceiling is the rig's;
4. ``idle`` -- on a fresh server: RSS with N open streams waiting for their first token;
5. ``slow`` -- on a fresh server: RSS over time with slow readers of long, fast streams.

Measurements go config by config inside each phase, so the direct path and the proxies are
measured minutes apart at most on a machine whose load moves.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import meter, stats
from bench.configs import Config, Server, start_mock

MODEL = "mock-gpt"
TPS = stats.TOKENS_PER_S
INTERVAL_S = 1.0 / TPS
TTFT_MS = 20
TOKENS = 40  # 2 s per stream at 20 tokens/s
WARM_UP = "ttft_ms=0;tps=1000;tokens=5"
# A burst measures first tokens: two-token answers keep the rest of each stream (and its CPU)
# out of the figure, so the burst's CPU is the cost of taking requests.
BURST = "tokens=2"
Log = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    steady_streams: int = 100
    steady_s: float = 10.0
    stagger_s: float = 2.0
    burst_streams: int = 100
    burst_rounds: int = 3
    levels: tuple[int, ...] = (50, 100, 200, 300, 400, 500, 600)
    level_s: float = 5.0
    idle_streams: int = 1000
    idle_hold_s: float = 3.0
    slow_streams: int = 20
    slow_hold_s: float = 6.0
    slow_scenario: str = "ttft_ms=0;tps=1000;tokens=20000"
    slow_read_bytes: int = 1024
    slow_read_every_s: float = 0.1

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            steady_s=2.0,
            stagger_s=1.0,
            burst_rounds=1,
            levels=(),
            idle_streams=100,
            idle_hold_s=0.5,
            slow_streams=10,
            slow_hold_s=1.5,
        )


@dataclass
class Result:
    """Everything one run measured, JSON-ready."""

    plan: dict[str, Any]
    machine: dict[str, Any]
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    loadavg: list[dict[str, Any]] = field(default_factory=list)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    wall_s: float = 0.0


def metered(spec: dict[str, Any], pid: int | None) -> tuple[dict[str, Any], float]:
    """Run the load generator on ``spec``; return what it saw and the CPU seconds that process
    ``pid`` and its children used meanwhile."""
    before = meter.read(pid)
    raw = loadgen(spec)
    return raw, meter.read(pid).cpu_s - before.cpu_s


def loadgen(
    spec: dict[str, Any],
    on_ready: Callable[[dict[str, Any]], None] | None = None,
    every: tuple[float, Callable[[], None]] | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Run ``bench.loadgen`` in its own process; return its result line.

    ``on_ready`` gets the ``ready`` line (idle/slow shapes); ``every=(seconds, fn)`` calls
    ``fn`` periodically while the load runs (memory sampling)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.loadgen", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    deadline = time.monotonic() + timeout
    result: dict[str, Any] | None = None
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=every[0] if every else 1.0)
            except queue.Empty:
                if every:
                    every[1]()
                continue
            if line is None:
                break
            message = json.loads(line)
            if message["event"] == "ready" and on_ready:
                on_ready(message)
            elif message["event"] == "result":
                result = message
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        pumping.join(timeout=5)  # the child is gone: its stdout is at its end
        stderr = process.stderr.read() if process.stderr else ""
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    if result is None:
        raise RuntimeError(
            f"the load generator gave no result (exit {process.returncode}):\n{stderr[-2000:]}"
        )
    return result


def reset_mock(mock: Server) -> None:
    request = urllib.request.Request(f"{mock.url}/debug/reset", method="POST")
    with urllib.request.urlopen(request, timeout=5):
        pass


def spec_for(server: Server, shape: str, **extra: Any) -> dict[str, Any]:
    return {"port": server.port, "model": MODEL, "shape": shape, "stream_timeout_s": 60, **extra}


def timing(raw: dict[str, Any]) -> dict[str, Any]:
    """The part of a load result the report needs (the raw samples stay out of the JSON)."""
    ttft = stats.Summary.of(raw["ttft_s"])
    itl = stats.Summary.of(raw["gaps_s"])
    medians = raw["stream_median_gaps_s"]
    return {
        "streams": raw["streams"],
        "completed": raw["completed"],
        "failed": raw["failed"],
        "errors": raw["errors"],
        "ttft": asdict(ttft),
        "itl": asdict(itl),
        "median_gap_ms": stats.percentile(raw["gaps_s"], 0.5) * 1000,
        "batched": stats.is_batched(raw["gaps_s"], INTERVAL_S),
        "batched_streams": sum(1 for m in medians if m < stats.BATCHED_FRACTION * INTERVAL_S),
        "same_read_chunks": raw["same_read"],
        "events": raw["events"],
        "loadgen_cpu_s": raw["loadgen_cpu_s"],
        "wall_s": raw["wall_s"],
        # per request, so the report can compare a configuration with direct seed by seed
        "ttft_by_seed_ms": {
            seed: round(t * 1000, 3) for seed, t in raw.get("ttft_by_seed", {}).items()
        },
    }


def pooled(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """Several load results of one shape as one: counts added, samples joined."""
    out: dict[str, Any] = {}
    for raw in raws:
        for key, value in raw.items():
            if key == "ttft_by_seed":  # rounds repeat their seeds: nothing to pair by
                continue
            if isinstance(value, list):
                out[key] = [*out.get(key, []), *value]
            elif isinstance(value, dict):
                merged = dict(out.get(key, {}))
                for k, v in value.items():
                    merged[k] = merged.get(k, 0) + v
                out[key] = merged
            elif isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
            else:
                out[key] = value
    return out


class Run:
    def __init__(self, configs: list[Config], plan: Plan, log: Log) -> None:
        self.configs = configs
        self.plan = plan
        self.log = log
        self.result = Result(plan=asdict(plan), machine=machine())

    def note_load(self, phase: str) -> None:
        one, five, fifteen = os.getloadavg()
        self.result.loadavg.append({"phase": phase, "1m": one, "5m": five, "15m": fifteen})

    def figures(self, config: Config) -> dict[str, Any]:
        return self.result.configs.setdefault(config.name, {"label": config.label})

    def execute(self) -> Result:
        began = time.monotonic()
        runnable = []
        for config in self.configs:
            why = config.unavailable()
            if why:
                self.result.skipped[config.name] = why
                self.log(f"skip {config.name}: {why}")
            else:
                runnable.append(config)
        self.note_load("start")
        mock = start_mock(TTFT_MS, TPS, TOKENS)
        servers: dict[str, Server] = {}
        live: list[Config] = []
        try:
            for config in runnable:
                try:
                    servers[config.name] = config.start(mock)
                except RuntimeError as exc:
                    self.result.skipped[config.name] = f"did not start: {exc}"
                    self.log(f"skip {config.name}: did not start ({str(exc).splitlines()[0]})")
            live = [c for c in runnable if c.name in servers]
            self.timed_phases(live, servers, mock)
        finally:
            for server in servers.values():
                server.stop()
            mock.stop()
        memory = [c for c in live if c.launcher.memory_note is None]
        for c in live:
            if c.launcher.memory_note is not None:
                self.figures(c)["memory_note"] = c.launcher.memory_note
        self.memory_phases(memory)
        self.note_load("end")
        self.result.wall_s = time.monotonic() - began
        return self.result

    # -- steady, burst, capacity: all servers up, one mock ------------------------------------
    def timed_phases(self, live: list[Config], servers: dict[str, Server], mock: Server) -> None:
        plan = self.plan
        self.note_load("steady")
        for config in live:
            server = servers[config.name]
            pid = server.pid if server.pid is not None else mock.pid
            reset_mock(mock)
            self.log(f"steady {plan.steady_streams} streams, {plan.steady_s:g} s: {config.name}")
            raw, steady_cpu_s = metered(
                spec_for(
                    server,
                    "steady",
                    streams=plan.steady_streams,
                    seconds=plan.steady_s,
                    stagger_s=plan.stagger_s,
                ),
                pid,
            )
            steady = timing(raw)
            steady["server_cpu_s"] = steady_cpu_s
            steady["cpu_s_per_1000_chunks"] = 1000 * steady["server_cpu_s"] / max(raw["events"], 1)
            steady["metered"] = "mock" if server.pid is None else config.name
            self.figures(config)["steady"] = steady
        self.note_load("burst")
        # One burst is one noisy sample: run several rounds, the configurations taking turns
        # within each round, and pool each configuration's streams.
        rounds: dict[str, list[dict[str, Any]]] = {c.name: [] for c in live}
        cpu_s: dict[str, float] = {c.name: 0.0 for c in live}
        for round_no in range(plan.burst_rounds):
            for config in live:
                server = servers[config.name]
                pid = server.pid if server.pid is not None else mock.pid
                reset_mock(mock)
                self.log(
                    f"burst {plan.burst_streams} streams, round {round_no + 1} of "
                    f"{plan.burst_rounds}: {config.name}"
                )
                spec = spec_for(server, "burst", streams=plan.burst_streams, scenario=BURST)
                raw, burst_cpu_s = metered(spec, pid)
                rounds[config.name].append(raw)
                cpu_s[config.name] += burst_cpu_s
                time.sleep(0.5)
        for config in live:
            burst = timing(pooled(rounds[config.name]))
            burst["rounds"] = plan.burst_rounds
            burst["server_cpu_s"] = cpu_s[config.name]
            burst["cpu_ms_per_request"] = 1000 * cpu_s[config.name] / max(burst["streams"], 1)
            self.figures(config)["burst"] = burst
        if plan.levels:
            self.capacity(live, servers, mock)

    def capacity(self, live: list[Config], servers: dict[str, Server], mock: Server) -> None:
        """Rising levels until the direct path degrades (the rig's ceiling) or all have."""
        self.note_load("capacity")
        alive = list(live)
        direct_floor: float | None = None
        for level in self.plan.levels:
            direct_p99: float | None = None
            direct_completed: int | None = None
            for config in list(alive):
                reset_mock(mock)
                self.log(f"capacity {level} streams: {config.name}")
                raw = loadgen(
                    spec_for(
                        servers[config.name],
                        "steady",
                        streams=level,
                        seconds=self.plan.level_s,
                        stagger_s=2.0,
                    )
                )
                row = timing(raw)
                row["level"] = level
                if config.kind == "direct":
                    direct_p99 = row["itl"]["p99_ms"]
                    direct_completed = row["completed"]
                    direct_floor = direct_floor if direct_floor is not None else direct_p99
                    floor = direct_floor
                else:
                    floor = direct_p99 if direct_p99 is not None else row["itl"]["p99_ms"]
                row["floor_p99_itl_ms"] = floor
                row["sustained"] = stats.level_sustained(
                    row,
                    floor,
                    direct_completed=None if config.kind == "direct" else direct_completed,
                )
                figures = self.figures(config)
                figures.setdefault("capacity", []).append(row)
                if row["sustained"]:
                    figures["max_sustained"] = level
                else:
                    figures.setdefault("max_sustained", 0)
                    alive.remove(config)
                    if config.kind == "direct":
                        self.log(f"the direct path stops at {level}: the rig's ceiling")
                        alive = []
                        break
            if not alive:
                break
        last = self.plan.levels[-1]
        for config in alive:
            self.figures(config)["capacity_capped_by_plan"] = last

    # -- idle and slow: a fresh mock and server for each configuration ------------------------
    def memory_phases(self, live: list[Config]) -> None:
        self.note_load("memory")
        for config in live:
            mock = start_mock(TTFT_MS, TPS, TOKENS)
            server: Server | None = None
            try:
                server = config.start(mock)
                pid = server.pid if server.pid is not None else mock.pid
                if pid is None:
                    raise RuntimeError(f"{config.name}: no process to meter")
                # warm up imports and pools before the baseline reading
                loadgen(spec_for(server, "burst", streams=5, scenario=WARM_UP))
                self.figures(config)["idle"] = self.idle(config, server, pid)
                self.figures(config)["slow"] = self.slow(config, server, pid)
            except RuntimeError as exc:
                self.log(f"memory phases failed for {config.name}: {exc}")
                self.figures(config)["memory_error"] = str(exc)
            finally:
                if server is not None:
                    server.stop()
                mock.stop()

    def idle(self, config: Config, server: Server, pid: int) -> dict[str, Any]:
        plan = self.plan
        self.log(f"idle {plan.idle_streams} streams: {config.name}")
        base = meter.read(pid).rss_bytes
        seen: dict[str, Any] = {}

        def ready(message: dict[str, Any]) -> None:
            time.sleep(1.0)  # let every connection settle into its wait
            seen["rss"] = meter.read(pid).rss_bytes
            seen["open"] = message["open"]

        hold_ms = int((plan.idle_hold_s + 120) * 1000)
        raw = loadgen(
            spec_for(
                server,
                "idle",
                streams=plan.idle_streams,
                hold_s=plan.idle_hold_s + 1.0,
                open_s=2.0,
                scenario=f"ttft_ms={hold_ms}",
            ),
            on_ready=ready,
        )
        opened = int(seen.get("open", 0))
        grown = seen.get("rss", base) - base
        return {
            "requested": plan.idle_streams,
            "open": opened,
            "errors": raw["errors"],
            "base_rss_mib": base / 2**20,
            "loaded_rss_mib": seen.get("rss", base) / 2**20,
            "kib_per_stream": grown / 1024 / opened if opened else float("nan"),
            "metered": "mock" if server.pid is None else config.name,
        }

    def slow(self, config: Config, server: Server, pid: int) -> dict[str, Any]:
        plan = self.plan
        self.log(f"slow readers {plan.slow_streams} streams: {config.name}")
        base = meter.read(pid).rss_bytes
        began = time.monotonic()
        samples: list[tuple[float, int]] = []

        def sample() -> None:
            samples.append((time.monotonic() - began, meter.read(pid).rss_bytes - base))

        loadgen(
            spec_for(
                server,
                "slow",
                streams=plan.slow_streams,
                hold_s=plan.slow_hold_s,
                open_s=0.2,
                scenario=plan.slow_scenario,
                read_bytes=plan.slow_read_bytes,
                read_every_s=plan.slow_read_every_s,
            ),
            every=(0.5, sample),
        )
        held = [s for s in samples if s[0] <= plan.slow_hold_s + 0.5]
        last = held[-1][1] if held else 0
        middle = held[len(held) // 2][1] if held else 0
        return {
            "streams": plan.slow_streams,
            "scenario": plan.slow_scenario,
            "samples": [[round(t, 2), b] for t, b in samples],
            "grown_mib": last / 2**20,
            "second_half_growth_mib": (last - middle) / 2**20,
            "kib_per_stream": last / 1024 / plan.slow_streams,
            "bounded": (last - middle) < 2 * 2**20,
            "metered": "mock" if server.pid is None else config.name,
        }


def machine() -> dict[str, Any]:
    import platform

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }
