"""How much CPU the grader may use here: the container's quota, read from its cgroup.

Gradescope's default container has 0.5 vCPU (a CFS quota of 50 ms per 100 ms); a laptop has
several cores. The checks judge properties in tokens, states and ratios wherever they can, but
every check also has a time budget that only guards against a proxy that never answers, and
on half a CPU everything takes about twice as long. ``Budget.scale`` stretches those budgets
below one CPU, so a slow machine never turns into "the proxy stopped answering".

What grading does with less CPU: from two CPUs up, nothing changes. Below two, the flat-out
``backpressure`` lane waits until the other lanes are done (``labkit.checks.runner``). Below
one, budgets stretch by ``Budget.scale`` and the ``backpressure`` window by up to two, so that
at half a CPU (Gradescope's default) every verdict comes out as on a big machine. A check that
still cannot decide says ``inconclusive`` rather than FAIL. ``python -m bench.small_container``
grades the references and every broken proxy of ``tests/grading/broken`` in a small cgroup to
show it; its figures are in docs/instructors.md ("Which container to choose").

A grading holds one ``Budget`` (the CPUs, and the stretch of every limit that follows from
them), made once at its top with ``Budget.here()`` and handed down: to the checks in their
``CheckContext``, to the rubric's time limit, to the sandbox's start limit, to the notebook
parts' budgets and, for a class, to every grading worker (``--cpus``). So every limit of a
grading agrees, and a caller can grade as if on another machine (``Budget(cpus=0.5)``).

Only the top level reads the machine: the CLI, and the public entry points given no budget
(``arun_checks``/``run_checks``, ``check_proxy``, ``grade_file``/``agrade_file``,
``agrade_url``, ``grade_many``, ``check_environment``), each with one explicit
``Budget.here()``. Every function below them takes ``budget: Budget`` as a required argument,
so a caller that forgets to pass one is told so instead of silently getting this machine.
Nothing keeps a process-wide reading: ``describe()`` (what Gradescope's set-up prints) reads
this process's CPUs anew.

``cpu_limit`` reads cgroup v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``)
for this process's cgroup and every parent up to the root (the smallest quota wins), and the
CPUs this process may run on. None of it needs privileges; anything unreadable counts as no
limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MAX_BUDGET_SCALE",
    "Budget",
    "cpu_limit",
    "describe",
    "own_cgroups",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
MAX_BUDGET_SCALE = 4.0


def own_cgroups(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}; cgroup v2's line has the key ``""``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        for controller in controllers.split(","):
            paths[controller] = path
    return paths


def _ancestors(root: Path, path: str) -> list[Path]:
    parts = [p for p in path.split("/") if p]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return None


def _quota_v2(folder: Path) -> float | None:
    text = _read(folder / "cpu.max")
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _quota_v1(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def cpu_limit(proc_cgroup: str | None = None, root: Path = CGROUP_ROOT) -> float:
    """The CPUs this process may use: the smallest cgroup quota above it, or its CPU count."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    own = own_cgroups(proc_cgroup)
    quotas: list[float] = []
    try:
        if "" in own:
            quotas += [q for f in _ancestors(root, own[""]) if (q := _quota_v2(f)) is not None]
        if "cpu" in own:  # v1: ``cpu`` is mounted alone or as ``cpu,cpuacct`` (linked as ``cpu``)
            base = root / "cpu"
            quotas += [q for f in _ancestors(base, own["cpu"]) if (q := _quota_v1(f)) is not None]
    except ValueError:  # a file with something other than numbers in it: no limit known
        quotas = []
    return min([cpus, *quotas])


def _stretch(cpus: float) -> float:
    return min(MAX_BUDGET_SCALE, max(1.0, 1.0 / max(cpus, 1e-3)))


@dataclass(frozen=True)
class Budget:
    """The CPUs a check run has, and how much longer than usual its time limits are for them."""

    cpus: float

    @classmethod
    def here(cls) -> Budget:
        """This process's: the CPUs ``cpu_limit`` reads."""
        return cls(cpu_limit())

    @property
    def scale(self) -> float:
        """How much longer than usual a check may take: 1 from one CPU up, 2 at half a CPU, at
        most MAX_BUDGET_SCALE."""
        return _stretch(self.cpus)

    def stretch(self, seconds: float) -> float:
        """``seconds``, a limit set for one CPU, for these CPUs."""
        return seconds * self.scale

    def start_scale(self, together: int = 1) -> float:
        """How much longer than one process alone on a CPU ``together`` processes starting at
        once may take to start: ``scale`` for a CPU below one, times how many processes share
        each CPU. One alone: 1 from one CPU up, 2 at half a CPU (as ``scale``); four at once: 2
        on two CPUs, 8 on half a CPU.

        Processes that start together share the CPU, so the last of them is ready only once
        all have had their CPU time: the grader's four lane proxies on half a CPU take several
        times one proxy's start, and a limit sized for one alone would fail a correct but
        heavier proxy (the aiohttp reference) with ``start_timeout`` (figures in
        docs/instructors.md).
        """
        return self.scale * max(1.0, together / max(self.cpus, 1.0))

    def describe(self) -> str:
        """What grading had, for the report: ``2 CPUs``, or ``0.5 CPU: time budgets x2``."""
        text = f"{self.cpus:g} CPU" + ("s" if self.cpus > 1 else "")
        if self.scale > 1:
            text += f": time budgets x{self.scale:g}"
            if self.scale >= MAX_BUDGET_SCALE:
                text += " (the most they stretch: below this, expect inconclusive checks)"
        return text


def describe() -> str:
    """``Budget.describe`` for this process's CPUs, read anew."""
    return Budget.here().describe()
