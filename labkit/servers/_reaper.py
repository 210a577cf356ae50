"""The servers a process leaves behind when it is killed, killed after it.

``stop()`` and the registry's ``atexit`` hook end every server a process started, but only if
that process runs its exit code: a kernel killed with SIGKILL (nbval stops every notebook's
kernel so, ``shutdown_kernel(now=True)``) leaves its nginx, Redis and proxies running for
ever, in sessions of their own. So the first server a process starts also starts a *reaper*: a
small Python in a session of its own that reads, on a pipe only this process writes, which
process groups are live (``+PGID``) and which were stopped (``-PGID``). The pipe ends when this
process ends, however it ends; the reaper then SIGKILLs the groups still live, and exits.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from typing import IO

__all__ = ["forget", "watch"]

_REAPER = """
import os, signal, sys
groups = set()
for line in sys.stdin.buffer:
    pgid = int(line[1:])
    groups.add(pgid) if line[:1] == b"+" else groups.discard(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""

_lock = threading.Lock()
_reaper: subprocess.Popen[bytes] | None = None  # kept, so it is never collected while it runs
_pipe: IO[bytes] | None = None
_owner = 0  # the pid that started the reaper: a forked child starts one of its own


def _send(line: str) -> None:
    global _reaper, _pipe, _owner
    with _lock:
        if _pipe is None or _owner != os.getpid():
            _reaper = reaper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _REAPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the group a killer of this process signals
            )
            assert reaper.stdin is not None
            _pipe, _owner = reaper.stdin, os.getpid()
        try:
            _pipe.write(f"{line}\n".encode())
            _pipe.flush()
        except OSError:  # the reaper is gone (killed by hand): the servers' own stop() remains
            _pipe = None


def watch(pgid: int) -> None:
    """Have the group ``pgid`` killed if this process ends before it is ``forget``-ed."""
    _send(f"+{pgid}")


def forget(pgid: int) -> None:
    """The group ``pgid`` was stopped: nothing to kill when this process ends."""
    _send(f"-{pgid}")


def _close() -> None:
    """At a normal exit, after the registry has stopped every server (``atexit`` runs its
    hooks last registered first, and this one is registered on import, before any server):
    end the pipe, so the reaper finds nothing left to kill and exits."""
    with _lock:
        if _reaper is None or _pipe is None or _owner != os.getpid():
            return
        try:
            _pipe.close()
            _reaper.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


atexit.register(_close)
