"""One cgroup with limits on CPU, memory and processes, cgroup v1 or v2: the one class for it.

The grader makes one per proxy (memory and processes, below the grader's own cgroup, so that
whatever limits the instructor's container or job put on the grader hold for the proxies too;
:meth:`Cgroup.create`), and the small-container bench one per grading (a CPU quota and memory,
Gradescope's limits; :meth:`Cgroup.make` with ``below_own=False``). A process joins it with
:meth:`Cgroup.join_prefix` (a shell that writes its own pid into ``cgroup.procs`` and then
``exec``s the command, so everything it starts is inside from its first instruction).

v2 has one tree (``dirs["unified"]``), v1 a tree per controller (``dirs["cpu"]``,
``dirs["memory"]``, ``dirs["pids"]``); only the controllers a limit needs are used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from labkit.checks.machine import CGROUP_ROOT, own_cgroups
from labkit.errors import CgroupUnavailable

__all__ = ["PERIOD_US", "Cgroup", "CgroupLimits", "CgroupUnavailable"]

PERIOD_US = 100_000
_MIB = 1024 * 1024


@dataclass(frozen=True)
class CgroupLimits:
    """What the processes of one cgroup may use together (None: no limit of that kind)."""

    cpu: float | None = None  # CPUs: 0.5 is a quota of 50 000 µs per 100 000 µs
    memory_bytes: int | None = None  # swap is limited to nothing on top, where it is counted
    processes: int | None = None

    def controllers(self) -> list[str]:
        wanted = [("cpu", self.cpu), ("memory", self.memory_bytes), ("pids", self.processes)]
        return [name for name, limit in wanted if limit is not None]


class _ProxyLimits(Protocol):
    @property
    def memory_bytes(self) -> int: ...

    @property
    def processes(self) -> int: ...


def _below(tree: Path, path: str) -> Path:
    return tree.joinpath(*[part for part in path.split("/") if part])


class Cgroup:
    """A cgroup made by :meth:`make` (or :meth:`create`); ``remove()`` kills what is left in it
    and deletes it."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @property
    def version(self) -> int:
        return 2 if "unified" in self.dirs else 1

    @classmethod
    def create(
        cls, limits: _ProxyLimits, *, root: Path = CGROUP_ROOT, proc_cgroup: str | None = None
    ) -> Cgroup | None:
        """A memory and pids cgroup for one proxy, below the grader's own cgroup; ``None`` if
        none can be made here (v2 below a cgroup that has processes of its own cannot hand its
        controllers down: no cgroup rather than one that escapes the instructor's limits)."""
        wanted = CgroupLimits(memory_bytes=limits.memory_bytes, processes=limits.processes)
        try:
            return cls.make(wanted, root=root, proc_cgroup=proc_cgroup)
        except CgroupUnavailable:
            return None

    @classmethod
    def make(
        cls,
        limits: CgroupLimits,
        *,
        root: Path = CGROUP_ROOT,
        proc_cgroup: str | None = None,
        below_own: bool = True,
        prefix: str = "labkit",
    ) -> Cgroup:
        """A new cgroup with ``limits``: below this process's own (``/proc/self/cgroup``), or
        with ``below_own=False`` at the top of each tree. Raises :class:`CgroupUnavailable`."""
        if root == CGROUP_ROOT and os.geteuid() != 0:
            raise CgroupUnavailable("creating a cgroup needs root")
        own: dict[str, str] = {}
        if below_own:
            if proc_cgroup is None:
                try:
                    proc_cgroup = Path("/proc/self/cgroup").read_text()
                except OSError as exc:
                    raise CgroupUnavailable(f"cannot read /proc/self/cgroup: {exc}") from None
            own = own_cgroups(proc_cgroup)
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        controllers = limits.controllers()
        made: dict[str, Path] = {}
        try:
            if (root / "cgroup.controllers").exists():  # v2: one tree
                parent = _below(root, own.get("", "/"))
                available = (parent / "cgroup.controllers").read_text().split()
                missing = [c for c in controllers if c not in available]
                if missing:
                    raise CgroupUnavailable(
                        f"cgroup v2 without {' and '.join(missing)} ({available})"
                    )
                with contextlib.suppress(OSError):  # allowed at the root, and where no
                    # process sits in this process's own cgroup (a systemd scope, a job)
                    enable = " ".join(f"+{c}" for c in controllers)
                    (parent / "cgroup.subtree_control").write_text(enable)
                path = parent / name
                path.mkdir()
                made["unified"] = path
                cls(made)._limit_v2(limits)
            else:  # v1: a tree per controller
                for controller in controllers:
                    path = _below(root / controller, own.get(controller, "/")) / name
                    path.mkdir()
                    made[controller] = path
                cls(made)._limit_v1(limits)
        except OSError as exc:
            cls(made).remove()
            version = 2 if "unified" in made else 1
            raise CgroupUnavailable(f"cgroup v{version} limits could not be set: {exc}") from None
        except CgroupUnavailable:
            cls(made).remove()
            raise
        return cls(made)

    def _limit_v2(self, limits: CgroupLimits) -> None:
        folder = self.dirs["unified"]
        if limits.cpu is not None:
            (folder / "cpu.max").write_text(f"{_quota(limits.cpu)} {PERIOD_US}")
        if limits.memory_bytes is not None:
            (folder / "memory.max").write_text(str(limits.memory_bytes))
            with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to cap
                (folder / "memory.swap.max").write_text("0")
        if limits.processes is not None:
            (folder / "pids.max").write_text(str(limits.processes))

    def _limit_v1(self, limits: CgroupLimits) -> None:
        if limits.cpu is not None:
            (self.dirs["cpu"] / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(_quota(limits.cpu)))
        if limits.memory_bytes is not None:
            memory = self.dirs["memory"]
            (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():  # memory plus swap: the same, so no swap on top
                swap.write_text(str(limits.memory_bytes))
        if limits.processes is not None:
            (self.dirs["pids"] / "pids.max").write_text(str(limits.processes))

    def join_prefix(self) -> list[str]:
        """A shell that moves itself into this cgroup, then ``exec``s the command after it."""
        writes = "; ".join(f'echo $$ > "{d / "cgroup.procs"}"' for d in self.dirs.values())
        return ["/bin/sh", "-c", f'{writes} && exec "$@"', "labkit-cgroup"]

    def _read(self, controller: str, name: str) -> str | None:
        folder = self.dirs.get("unified", self.dirs.get(controller))
        if folder is None:
            return None
        try:
            return (folder / name).read_text()
        except OSError:
            return None

    def oom_kills(self) -> int:
        """How many processes of this cgroup the kernel killed for memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in (self._read("memory", name) or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def memory_exceeded(self) -> bool:
        """Whether the kernel had to kill a process of this cgroup for memory."""
        return self.oom_kills() > 0

    def peak_memory_mb(self) -> float | None:
        """The most memory the cgroup held at once, so far."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = self._read("memory", name)
        return None if text is None else int(text) / _MIB

    def throttled_s(self) -> float | None:
        """Time the CPU quota held the cgroup back, so far."""
        text = self._read("cpu", "cpu.stat")
        if text is None:
            return None
        stats = dict(line.split() for line in text.splitlines() if line.strip())
        if "throttled_time" in stats:  # v1, nanoseconds
            return int(stats["throttled_time"]) / 1e9
        if "throttled_usec" in stats:  # v2
            return int(stats["throttled_usec"]) / 1e6
        return None

    def kill_all(self) -> None:
        """SIGKILL whatever is still in the cgroup (a daemon that escaped its session)."""
        for directory in self.dirs.values():
            try:
                pids = (directory / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass

    def remove(self) -> None:
        """Kill what is left in the cgroup and delete it."""
        self.kill_all()
        for directory in self.dirs.values():
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes still leaving
                    time.sleep(0.02)


def _quota(cpu: float) -> int:
    return max(1000, round(cpu * PERIOD_US))
