"""The network a grading's processes see: a namespace of their own with only loopback in it.

A grading talks over loopback: the checks reach the submission's proxy, the proxy reaches the
grader's mock upstreams. On the machine's own loopback, a line of learner code run at import
could also reach anything else that listens there (a notebook server, another grading's mocks)
and, through the machine's other interfaces, the internet. ``enter_own_namespace`` moves the
calling process (the grading worker, first thing, before it starts any thread or child) into a
new network namespace whose only interface is a loopback of its own, brought up here. Every
process it starts afterwards (mocks, proxies in their sandboxes) is born in it, so the grading
works unchanged on 127.0.0.1 while nothing outside the grading can be reached; when its last
process ends, the namespace goes with it.

Linux allows this to root (``CAP_SYS_ADMIN``) and, where unprivileged user namespaces are
allowed, to any user (inside a user namespace that maps the user to itself, so uids and file
owners stay what they were). Where it is refused (a container without ``CAP_SYS_ADMIN``, a
kernel that forbids user namespaces, a user namespace without the rights to bring its loopback
up, or not Linux), grading goes on with the machine's network and the report says why. The move
is tried in a forked child first, so a namespace that cannot be finished never strands the
grader in it. ``LABKIT_NETWORK=shared`` turns it off on purpose. ``Network.describe()`` is the
report's ``network:`` line: ``loopback only`` or ``shared (why)``.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from errno import EPERM

from labkit.errors import NetworkSetupError, SettingError
from labkit.settings import NETWORK, NetworkChoice

__all__ = [
    "NETWORK_ENV",
    "Network",
    "NetworkChoice",
    "NetworkSetupError",
    "bring_up_loopback",
    "enter_own_namespace",
    "interfaces",
    "seen_from_here",
]

NETWORK_ENV = NETWORK.name

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the interface's name, then its flags (40 bytes on Linux)
_ASK = (
    "run the grader as root, or where unprivileged user namespaces are allowed, to give each "
    "grading a network of its own"
)


@dataclass(frozen=True)
class Network:
    """The network a grading ran in: its own loopback only, or the machine's (and why)."""

    isolated: bool
    why_shared: str = ""

    def describe(self) -> str:
        return "loopback only" if self.isolated else f"shared ({self.why_shared})"


def interfaces() -> list[str]:
    """The network interfaces this thread's namespace has, by name (``lo``, ``eth0``, ...)."""
    return [name for _, name in socket.if_nameindex()]


def seen_from_here(why_shared: str) -> Network:
    """The network this process has now: loopback only if ``lo`` is its one interface, else
    shared, for ``why_shared``."""
    return Network(True) if interfaces() == ["lo"] else Network(False, why_shared)


def enter_own_namespace(choice: NetworkChoice | None = None) -> Network:
    """Move this process into a new network namespace with only loopback, up; what it got.

    Call it before the process starts any thread or child: they are born in the namespace of
    the thread that starts them. ``choice`` (default: ``LABKIT_NETWORK``, else ``"own"``)
    ``"shared"`` leaves the network as it is. Never raises for what the machine refuses: the
    returned ``Network`` says it. Raises ``NetworkSetupError`` only if a namespace that a
    trial in a child could set up then fails in this process.
    """
    try:
        wanted = choice or NETWORK.read()
    except SettingError as exc:  # the machine's network, and the report says why
        return Network(False, str(exc))
    if wanted == "shared":
        return Network(False, f"turned off with {NETWORK_ENV}=shared")
    if not sys.platform.startswith("linux"):
        return Network(False, f"network namespaces are Linux's, and this is {sys.platform}")
    if interfaces() == ["lo"]:  # already alone (a worker started inside a namespace)
        bring_up_loopback()
        return Network(True)
    # Tried first in a child: a move that fails halfway (a user namespace without the rights to
    # bring its loopback up) would leave this process in a namespace it cannot leave again.
    refused = _in_a_child(_move)
    if refused:
        return Network(False, refused)
    refused = _move()
    if refused:
        raise NetworkSetupError(
            f"this grading's own network namespace could not be set up ({refused}), although "
            f"a trial in a child process could. Set {NETWORK_ENV}=shared to grade on the "
            "machine's network instead."
        )
    return seen_from_here("the new namespace holds more than loopback")


def _move() -> str:
    """Into a new network namespace with its loopback up: '' once there, else why not."""
    refused = _unshare_network()
    if refused:
        return refused
    try:
        bring_up_loopback()
    except OSError as exc:
        return f"the new namespace's loopback could not be brought up ({exc}): {_ASK}"
    return ""


def _in_a_child(attempt: Callable[[], str]) -> str:
    """``attempt()`` run in a forked child (its namespaces go with it); what it returned, or
    why it could not run."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once (no atexit, no buffers of the parent)
        try:
            os.close(read)
            answer = attempt()
        except BaseException as exc:  # every failure becomes the parent's reason
            answer = f"{type(exc).__name__}: {exc}"
        os.write(write, answer.encode("utf-8", "replace")[:4096])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    if status != 0 and not answer:
        return f"the trial of a network namespace ended with status {status}"
    return answer


def _unshare_network() -> str:
    """'' once this process is in a new network namespace, else why it could not be."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) == 0:
        return ""
    errno = ctypes.get_errno()
    plain = os.strerror(errno)
    if os.geteuid() == 0:
        # root without CAP_SYS_ADMIN (a container): a user namespace would not map the uids the
        # sandbox drops to, so it is not tried
        why = f"{plain}: no CAP_SYS_ADMIN" if errno == EPERM else plain
        return f"the kernel refused a network namespace to root ({why})"
    if threading.active_count() > 1:
        return f"the kernel refused a network namespace ({plain}), and {_ASK}"
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        user = os.strerror(ctypes.get_errno())
        return (
            f"the kernel refused a network namespace ({plain}) and a user namespace "
            f"({user}): {_ASK}"
        )
    try:  # map the user to itself: the same uid, the same owner on every file it writes
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        return f"a user namespace could not map uid {uid} to itself ({exc}): {_ASK}"
    return ""


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(text)


def bring_up_loopback() -> None:
    """Set ``lo`` up (a new namespace's loopback starts down). Raises ``OSError``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, asked))[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
