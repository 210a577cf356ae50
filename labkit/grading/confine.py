"""A forked process confines itself as ``bwrap`` confines a command, without starting Python again.

Bubblewrap (``labkit.grading.isolation.Bubblewrap``) confines a *command*: the process it
starts is a fresh interpreter that must import everything again. The notebook runner's imports
(both SDKs, IPython, the checks) cost seconds of CPU per learner, so a class is graded by
children forked from one pre-imported parent (``labkit.grading.zygote``), and each child, still
root, builds its own sandbox before it runs a line of learner code:

1. it joins its cgroup (memory and processes, counted for this learner alone) and lowers its
   priority;
2. it moves into new mount, PID, network, IPC and UTS namespaces, and forks: the grandchild is
   process 1 of the new PID namespace, so everything the learner's code starts dies with it;
3. the grandchild builds a new root on a tmpfs holding only what ``Bubblewrap`` binds: the
   system and Python read-only, the learner's own folder writable, a private ``/tmp``, a small
   ``/dev``, its own ``/proc``; it pivots into it and lets go of the old root;
4. it brings up the new network namespace's loopback (the notebooks serve their own mocks,
   proxies and nginx there, and reach nothing else);
5. it sets the file size, CPU and core limits, drops to the unprivileged user with no groups,
   no capabilities and no way to gain any (``PR_SET_NO_NEW_PRIVS``), and asks to be killed
   when the child above it dies.

Only then does it run what it was forked for. Root only (the mounts and the cgroup need it);
``confinement_works()`` tries the whole sequence once and says why not, and the grader then
starts the runner through ``bwrap`` as before.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labkit.grading.network import bring_up_loopback

__all__ = ["Sandbox", "confinement_works", "run_confined"]

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MNT_DETACH = 0x2
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


@dataclass(frozen=True)
class Sandbox:
    """What one confined process may see and use: the folders bound into its new root, the
    user it runs as, its limits and its cgroup."""

    readonly: tuple[str, ...]  # the system and Python, bound read-only at the same paths
    writable: tuple[str, ...]  # the learner's own folder(s)
    uid: int  # the unprivileged user it drops to (its group has the same number)
    cgroup_procs: tuple[str, ...] = ()  # each controller's cgroup.procs file, joined first
    niceness: int = 0
    file_bytes: int = 0  # 0: no limit of that kind
    cpu_s: int = 0
    address_space_bytes: int = 0
    new_root: str = "/tmp"  # an empty folder to mount the new root on (in the new namespace)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "/"


class _Libc:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL(None, use_errno=True)

    def check(self, result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def unshare(self, flags: int) -> None:
        self.check(self.lib.unshare(flags), "unshare")

    def mount(
        self, source: str | None, target: str, kind: str | None, flags: int, data: str | None = None
    ) -> None:
        result = self.lib.mount(
            _bytes(source), _bytes(target), _bytes(kind), ctypes.c_ulong(flags), _bytes(data)
        )
        self.check(result, f"mount {source or kind} on {target}")

    def umount(self, target: str) -> None:
        self.check(self.lib.umount2(target.encode(), _MNT_DETACH), f"umount {target}")

    def pivot_root(self) -> None:
        number = _SYS_PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise OSError(f"pivot_root's number on {os.uname().machine} is not known here")
        self.check(self.lib.syscall(number, b".", b"."), "pivot_root")

    def prctl(self, option: int, value: int) -> None:
        self.check(self.lib.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl {option}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def run_confined(sandbox: Sandbox, work: Callable[[], int]) -> int:
    """Confine this (forked, root, single-threaded) process in ``sandbox`` and run ``work``
    in it; the exit status of the confined process. Meant for a child that leaves with
    ``os._exit`` right after: the namespaces it entered are not left again."""
    libc = _Libc()
    for procs in sandbox.cgroup_procs:
        Path(procs).write_text(str(os.getpid()))
    if sandbox.niceness:
        os.nice(sandbox.niceness)
    libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS)
    pid = os.fork()
    if pid == 0:  # process 1 of the new PID namespace
        code = 70  # EX_SOFTWARE: the sandbox could not be built
        try:
            _enter(libc, sandbox)
            code = work()
        except BaseException as exc:  # the parent sees the status; stderr says why
            print(f"confined run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _enter(libc: _Libc, sandbox: Sandbox) -> None:
    """Build the new root, move into it, and drop to the unprivileged user."""
    libc.mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here leaks out
    root = sandbox.new_root
    libc.mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=16m")
    _mkdir(root, "/tmp", 0o1777)  # first: a folder bound below /tmp goes on top of it
    libc.mount("tmpfs", f"{root}/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    _dev(libc, root)
    _mkdir(root, "/proc", 0o555)
    libc.mount("proc", f"{root}/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for path in _outermost(sandbox.readonly, sandbox.writable):
        _bind(libc, root, path, readonly=True)
    for path in sandbox.writable:
        _bind(libc, root, path, readonly=False)
    os.chdir(root)
    libc.pivot_root()  # the new root on top of the old one, then the old one let go
    libc.umount(".")
    os.chdir("/")
    bring_up_loopback()
    _limit(sandbox)
    os.setgroups([])
    os.setgid(sandbox.uid)
    os.setuid(sandbox.uid)  # every capability goes with root
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it
    os.setsid()
    os.chdir(sandbox.cwd)
    os.environ.clear()
    os.environ.update(sandbox.env)


def _outermost(readonly: Sequence[str], writable: Sequence[str]) -> list[str]:
    """The read-only folders to bind: each once, not one inside another already bound, and
    none that holds a writable folder or lies inside one (as ``Bubblewrap`` leaves them out)."""
    kept: list[str] = []
    for path in sorted(set(readonly), key=lambda p: (p.count("/"), p)):
        inside = [
            Path(path) == Path(w) or Path(path) in Path(w).parents or Path(w) in Path(path).parents
            for w in writable
        ]
        if any(inside) or not os.path.lexists(path):
            continue
        if any(Path(path).is_relative_to(k) for k in kept if not os.path.islink(k)):
            continue
        kept.append(path)
    return kept


def _mkdir(root: str, path: str, mode: int = 0o755) -> None:
    """``path`` under ``root``, and its missing parents, each with ``mode``."""
    target = Path(root + path)
    missing = [p for p in [*reversed(target.parents), target] if not p.exists()]
    for folder in missing:
        folder.mkdir()
        folder.chmod(mode if folder == target else 0o755)


def _bind(libc: _Libc, root: str, path: str, *, readonly: bool) -> None:
    """``path`` at the same place under ``root``: a symlink as a symlink (``/bin`` to
    ``usr/bin``), a folder or file as a bind mount, read-only with every mount below it."""
    target = root + path
    if os.path.islink(path):
        _mkdir(root, os.path.dirname(path))
        os.symlink(os.readlink(path), target)
        return
    if stat.S_ISDIR(os.stat(path).st_mode):
        _mkdir(root, path)
    else:
        _mkdir(root, os.path.dirname(path))
        Path(target).touch()
    libc.mount(path, target, None, _MS_BIND | _MS_REC)
    if readonly:
        for mounted in _mounts_at_or_below(target):
            libc.mount(
                None, mounted, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
            )


def _mounts_at_or_below(target: str) -> list[str]:
    """The mount points at ``target`` or below it, from this namespace's mount table."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == target or point.startswith(target.rstrip("/") + "/"):
            found.append(point)
    return found


def _dev(libc: _Libc, root: str) -> None:
    """A ``/dev`` with only the harmless devices, as ``bwrap --dev`` makes one."""
    _mkdir(root, "/dev")
    libc.mount("tmpfs", f"{root}/dev", "tmpfs", _MS_NOSUID, "mode=0755,size=64k")
    for name in _DEVICES:
        Path(f"{root}/dev/{name}").touch()
        libc.mount(f"/dev/{name}", f"{root}/dev/{name}", None, _MS_BIND)
    _mkdir(root, "/dev/shm", 0o1777)
    libc.mount("tmpfs", f"{root}/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    for name, points_to in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(points_to, f"{root}/dev/{name}")


def _limit(sandbox: Sandbox) -> None:
    """``prlimit``'s limits, set from inside."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for kind, value in (
        (resource.RLIMIT_FSIZE, sandbox.file_bytes),
        (resource.RLIMIT_CPU, sandbox.cpu_s),
        (resource.RLIMIT_AS, sandbox.address_space_bytes),
    ):
        if value:
            resource.setrlimit(kind, (value, value))


def confinement_works(new_root: str) -> str:
    """'' if a forked child can confine itself here (root, Linux, the kernel allows the
    namespaces and mounts), else why not. Tried in a child: this process stays as it was."""
    if not sys.platform.startswith("linux"):
        return f"confining a forked child is for Linux, and this is {sys.platform}"
    if os.geteuid() != 0:
        return "confining a forked child needs root (its mounts and cgroup)"
    probe = Sandbox(readonly=("/usr", "/etc"), writable=(), uid=65534, new_root=new_root)
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os._exit(run_confined(probe, lambda: 0 if os.getuid() == 65534 else 1))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "" if code == 0 else f"a forked child could not confine itself (status {code})"
