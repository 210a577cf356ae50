"""CPU seconds and resident memory of a server's whole process tree (psutil).

A tree, because nginx runs a master and a worker and LiteLLM may fork: the figures are summed
over the process and all its descendants that are alive at the time of the reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Reading:
    cpu_s: float
    rss_bytes: int


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def read(pid: int | None) -> Reading:
    """CPU (user + system) and RSS summed over ``pid``'s tree; zeros for no process."""
    if pid is None:
        return Reading(0.0, 0)
    cpu, rss = 0.0, 0
    for process in _tree(pid):
        try:
            with process.oneshot():
                times = process.cpu_times()
                cpu += times.user + times.system
                rss += process.memory_info().rss
        except psutil.Error:
            continue
    return Reading(cpu, rss)


def machine_busy_s() -> float:
    """The whole machine's busy CPU seconds since boot: every process, including those in
    sandboxes and cgroups that no process tree here reaches (everything but idle and I/O wait)."""
    times = psutil.cpu_times()
    return sum(
        getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal")
    )
