"""Where a submission's code runs: a sandbox chosen by what the machine allows.

Learner code is untrusted. Each proxy process the grader starts is wrapped, from the outside
in, by:

* ``sh -c 'echo $$ > cgroup.procs; exec ...'`` when a cgroup can be made (root, cgroup v1 or
  v2; :class:`labkit.grading.cgroups.Cgroup`): a memory limit (the kernel stops a proxy that
  holds more, and the grader reports it) and a process limit, counted for this proxy alone;
* ``bwrap`` (bubblewrap) when it works here: a new root that holds only the system, Python and
  the lab's packages read-only, the submission's own folder writable, a private ``/tmp``, its own
  PID namespace (every process it starts dies with it, new sessions included), and no view of
  the instructor's files, other submissions or the grader's output;
* ``setpriv`` to an unprivileged user when the grader runs as root;
* ``prlimit``: file size, CPU seconds and (without a cgroup) the address space.

The network is not the sandbox's: the whole grading (the worker, its mocks, every proxy) runs in
a network namespace of its own with only loopback in it (``labkit.grading.network``), so the
grader reaches the proxy and the proxy the mock, and learner code reaches nothing else.

A process the grader starts (a proxy, the notebook runner) gets a :class:`Confinement`: its own
cgroup where one can be made, and the wrapped command; releasing it kills what is left in the
cgroup and says whether the tree was over its memory limit.

Strategies are chosen by name, uvicorn-style: ``KINDS["bubblewrap"]``, ``KINDS["none"]``;
``choose()`` picks the strongest that works and says why it could not do better. "none" still
applies the limits it can and says plainly that learner code ran with the grader's rights.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import psutil

import labkit
import mock_upstream
from labkit.errors import SandboxUnavailableError
from labkit.grading.cgroups import Cgroup
from labkit.settings import SANDBOX, SandboxKind

__all__ = [
    "KINDS",
    "Bubblewrap",
    "Cgroup",
    "Confinement",
    "Isolation",
    "Kind",
    "Limits",
    "NoSandbox",
    "choose",
    "in_container",
    "readonly_paths",
]

Kind: TypeAlias = SandboxKind
NOBODY = 65534
MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one proxy process (with everything it starts) may use."""

    memory_bytes: int = 384 * MIB
    processes: int = 256
    file_bytes: int = 64 * MIB
    cpu_s: int = 300
    # Without a cgroup, memory can only be capped as address space: Python's threads reserve
    # far more than they use, so the cap is looser.
    address_space_bytes: int = 2048 * MIB

    def describe(self, *, cgroup: bool) -> str:
        if cgroup:
            return (
                f"{self.memory_bytes // MIB} MiB memory, {self.processes} processes, "
                f"{self.file_bytes // MIB} MiB per file, {self.cpu_s} s CPU"
            )
        return (
            f"{self.address_space_bytes // MIB} MiB address space, "
            f"{self.file_bytes // MIB} MiB per file, {self.cpu_s} s CPU"
        )


class Isolation:
    """The do-nothing base ("none"): limits through ``prlimit`` where it exists, no sandbox."""

    kind: Kind = "none"

    def __init__(self, limits: Limits, reason: str = "") -> None:
        self.limits = limits
        self.reason = reason

    def describe(self) -> str:
        return (
            f"no sandbox ({self.reason}): learner code ran with the grader's own rights; "
            f"limits: {self.limits.describe(cgroup=os.geteuid() == 0)}"
        )

    def grading_user(self) -> str:
        """Who runs learner code here, and in what, for a message."""
        return "the grader's own user (no sandbox)"

    def prepare(self, folders: Iterable[Path]) -> None:
        """Make ``folders`` (the submission's own) usable by the process that will run there."""

    def reap(self) -> int:
        """Kill what the submission left running once its grading ends (beyond its cgroup and
        PID namespace, which go with the proxy); how many processes that was."""
        return 0

    def wrap(
        self, argv: list[str], *, cgroup: Cgroup | None, writable: Iterable[Path]
    ) -> list[str]:
        return self._limits(argv, cgroup=cgroup)

    def _limits(self, argv: list[str], *, cgroup: Cgroup | None) -> list[str]:
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            return argv
        limits = [
            f"--fsize={self.limits.file_bytes}",
            f"--cpu={self.limits.cpu_s}",
            "--core=0",
        ]
        if cgroup is None:
            limits.append(f"--as={self.limits.address_space_bytes}")
        return [prlimit, *limits, "--", *argv]


class NoSandbox(Isolation):
    """No sandbox: as root, the proxy still runs as a user of its own (a uid no other
    grading uses), so it cannot write the grader's files, and every process it started, in any
    session, is killed by ``reap`` when the grading ends. Inside a container (Gradescope runs
    one per submission) the container is the sandbox around all of it."""

    kind: Kind = "none"

    def __init__(self, limits: Limits, reason: str = "", *, drop: bool | None = None) -> None:
        """``drop``: run learner code as a user of its own; by default when root, with
        ``setpriv``, and Python and the lab's packages readable by another user."""
        super().__init__(limits, reason)
        self.why_not_drop = ""
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            drop = False
        elif drop is None:
            self.why_not_drop = _unreachable(_needed_paths())
            drop = not self.why_not_drop
        self.uid: int | None = _grading_uid() if drop else None

    def describe(self) -> str:
        where = "inside a container, which is the sandbox: " if in_container() else ""
        rights = (
            "learner code ran with the grader's own rights"
            + (f" ({self.why_not_drop})" if self.why_not_drop else "")
            if self.uid is None
            else f"learner code ran as an unprivileged user of its own (uid {self.uid}), every "
            "process it started killed at the end"
        )
        return (
            f"{where}no sandbox of its own ({self.reason}): {rights}; "
            f"limits: {self.limits.describe(cgroup=os.geteuid() == 0)}"
        )

    def grading_user(self) -> str:
        if self.uid is None:
            return "the grader's own user (no sandbox of its own)"
        return f"the grading user (uid {self.uid}, no sandbox of its own)"

    def prepare(self, folders: Iterable[Path]) -> None:
        if self.uid is not None:
            for folder in folders:
                os.chown(folder, self.uid, self.uid)

    def wrap(
        self, argv: list[str], *, cgroup: Cgroup | None, writable: Iterable[Path]
    ) -> list[str]:
        command = self._limits(argv, cgroup=cgroup)
        if self.uid is None:
            return command
        drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        return [*drop, *command]

    def reap(self) -> int:
        """SIGKILL every process of this grading's user; how many there were."""
        if self.uid is None:
            return 0
        killed = 0
        for process in psutil.process_iter(["uids"]):
            try:
                if process.info["uids"] is not None and process.info["uids"].real == self.uid:
                    process.kill()
                    killed += 1
            except psutil.Error:
                continue
        return killed


def _needed_paths() -> list[str]:
    """What a proxy process must reach: the interpreter and the lab's packages."""
    return [
        os.path.realpath(sys.executable),
        os.path.dirname(os.path.abspath(labkit.__file__ or "")),
        os.path.dirname(os.path.abspath(mock_upstream.__file__ or "")),
    ]


def _unreachable(paths: Iterable[str]) -> str:
    """'' if a user with no group of ours can reach every path, else which one it cannot."""
    for path in paths:
        for folder in [*reversed(Path(path).parents), Path(path)]:
            try:
                mode = folder.stat().st_mode
            except OSError:
                continue
            if not mode & stat.S_IXOTH:
                return f"{path} is not reachable by another user: {folder} is closed to others"
    return ""


def _grading_uid() -> int:
    """A uid no account and no other grading on this machine uses (60000-64999)."""
    busy = set()
    for process in psutil.process_iter(["uids"]):
        with contextlib.suppress(psutil.Error, TypeError):
            busy.add(process.info["uids"].real)
    while True:
        uid = secrets.randbelow(5000) + 60000
        if uid not in busy:
            return uid


def in_container() -> bool:
    """Docker, Podman or a Kubernetes pod, by the marks they leave."""
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        return True
    try:
        text = Path("/proc/1/cgroup").read_text()
    except OSError:
        return False
    return any(mark in text for mark in ("docker", "kubepods", "containerd", "libpod"))


class Bubblewrap(Isolation):
    """bubblewrap with an allow-list root, as root dropping to ``nobody``."""

    kind: Kind = "bubblewrap"

    def describe(self) -> str:
        user = "an unprivileged user" if os.geteuid() == 0 else "the grader's user"
        return (
            "bubblewrap: a read-only system with only Python and the lab's packages, the "
            f"submission's own folder, a private /tmp and PID namespace, {user}; limits: "
            f"{self.limits.describe(cgroup=os.geteuid() == 0)}"
        )

    def grading_user(self) -> str:
        if os.geteuid() == 0:
            return f"the grading user (uid {NOBODY}, inside bubblewrap)"
        return "the grader's own user (inside bubblewrap)"

    def prepare(self, folders: Iterable[Path]) -> None:
        if os.geteuid() == 0:
            for folder in folders:
                os.chown(folder, NOBODY, NOBODY)

    def wrap(
        self, argv: list[str], *, cgroup: Cgroup | None, writable: Iterable[Path]
    ) -> list[str]:
        bwrap = shutil.which("bwrap")
        assert bwrap is not None
        command = [
            bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        writable = list(writable)
        binds = [(path, "--ro-bind-try") for path in readonly_paths(writable)]
        binds += [(str(folder), "--bind") for folder in writable]
        # bwrap makes missing parents 0700, which the unprivileged user could not cross
        parents = {str(p) for path, _ in binds for p in Path(path).parents if str(p) != "/"}
        for parent in sorted(parents, key=lambda p: (p.count("/"), p)):
            command += ["--perms", "0755", "--dir", parent]
        for path, flag in sorted(binds, key=lambda b: (b[0].count("/"), b[0])):
            command += [flag, path, path]
        command.append("--")
        if os.geteuid() == 0:
            command += ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            command.append("--")
        return command + self._limits(argv, cgroup=cgroup)


KINDS: dict[Kind, type[Isolation]] = {"bubblewrap": Bubblewrap, "none": NoSandbox}


def readonly_paths(writable: Iterable[Path]) -> list[str]:
    """What a sandbox binds read-only: the system, Python and the lab's packages. An import
    path that holds a writable folder (the worker's own home on ``sys.path``) would cover it
    with the real, private directory: such paths are left out."""
    writable = [Path(folder) for folder in writable]
    python = [
        p
        for p in _python_paths()
        if not any(Path(p) == f or Path(p) in f.parents for f in writable)
    ]
    readonly = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", *python]
    return [path for path in readonly if os.path.exists(path)]


def _python_paths() -> list[str]:
    """What the child needs to run Python and import the lab: the interpreter's prefixes and
    the import paths inside them, labkit's and mock_upstream's own folders (an editable install
    points into the instructor's checkout: bind the packages, not the checkout), and what
    ``PYTHONPATH`` names on purpose."""
    prefixes = {sys.base_prefix, sys.prefix}
    paths = {*prefixes, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {
        p
        for p in sys.path
        if p and os.path.isdir(p) and any(Path(p).is_relative_to(x) for x in prefixes)
    }
    for package in (labkit, mock_upstream):
        paths.add(os.path.dirname(os.path.abspath(package.__file__ or "")))
    extra = os.environ.get("PYTHONPATH", "")
    paths |= {os.path.abspath(p) for p in extra.split(os.pathsep) if p and os.path.isdir(p)}
    return sorted(paths)


def _bubblewrap_works() -> str:
    """'' if bwrap can run a command here, else why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not found: install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if done.returncode != 0:
        shown = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bwrap is refused here ({shown[-1] if shown else done.returncode}; in a container?)"
    return ""


class Confinement:
    """One process tree inside ``isolation``: a cgroup of its own with the isolation's limits
    (as root, where one can be made; else None) joined before the sandbox's wrappers."""

    def __init__(self, isolation: Isolation, cgroup: Cgroup | None) -> None:
        self.isolation = isolation
        self.cgroup = cgroup

    @classmethod
    def create(cls, isolation: Isolation, limits: Limits | None = None) -> Confinement:
        """With a cgroup holding ``limits`` (default: the isolation's) where one can be made."""
        wanted = isolation.limits if limits is None else limits
        cgroup = Cgroup.create(wanted) if os.geteuid() == 0 else None
        return cls(isolation, cgroup)

    def wrap(self, argv: list[str], *, writable: Iterable[Path]) -> list[str]:
        """``argv`` in the sandbox, with ``writable`` the folders it may write; the cgroup
        joined first, so everything the sandbox starts is counted in it."""
        wrapped = self.isolation.wrap(argv, cgroup=self.cgroup, writable=writable)
        return [*self.cgroup.join_prefix(), *wrapped] if self.cgroup is not None else wrapped

    def memory_exceeded(self) -> bool:
        return self.cgroup is not None and self.cgroup.memory_exceeded()

    def release(self) -> bool:
        """Kill what is left in the cgroup and remove it; whether the tree held more memory
        than its limit (False without a cgroup: nothing measured it)."""
        if self.cgroup is None:
            return False
        exceeded = self.cgroup.memory_exceeded()
        self.cgroup.remove()
        return exceeded


def choose(limits: Limits | None = None, kind: Kind | None = None) -> Isolation:
    """The strongest isolation this machine allows, or ``kind`` if given (``LABKIT_SANDBOX``
    may name one). Raises :class:`~labkit.errors.SandboxUnavailableError` when the sandbox
    asked for cannot run here: a grading setup error, not a verdict on a submission."""
    limits = limits or Limits()
    wanted = kind or SANDBOX.read()
    if wanted == "none":
        return NoSandbox(limits, f"turned off with {SANDBOX.name}=none")
    why_not = _bubblewrap_works()
    if not why_not:
        return Bubblewrap(limits)
    if wanted == "bubblewrap":
        raise SandboxUnavailableError(sandbox="bubblewrap", why_not=why_not)
    return NoSandbox(limits, why_not)
