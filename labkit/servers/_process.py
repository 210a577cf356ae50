"""A server that is a command of its own: started in its own session, waited for, stopped whole.

:class:`ProcessServer` is the one way labkit (and the bench) starts a child process that serves
and waits for it. The child runs in a new session (so ``stop()`` signals its whole process
group: SIGTERM, then SIGKILL after a grace), its stdout and stderr go to files in a folder of
its own (kept as text once it is stopped), and ``start()`` returns once the child is ready, or
raises a ``ServerStartError`` subclass: the child exited first (with the end of its stderr), or
the deadline passed.

"Ready" is a hook: by default the port accepts a connection (and, with ``ready_path``, a GET
of that path answers 200). A listening socket bound here (``bind_socket``) can be handed down
with ``sock=``: the child holds its own copy from its first instruction, so no other process can
take the port between choosing it and listening on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from labkit.errors import (
    AlreadyStartedError,
    ServerExitedError,
    ServerStartError,
    StartTimeoutError,
)
from labkit.servers import _reaper
from labkit.servers._handles import ServerHandle, registry

__all__ = ["ProcessServer"]

_STDERR_TAIL_LINES = 15


def tail(text: str, lines: int = _STDERR_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class ProcessServer(ServerHandle):
    """A command that serves on ``host:port``, in a session of its own."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        cwd: str | os.PathLike[str] | None = None,
        workdir: Path | None = None,
        sock: socket.socket | None = None,
        ready_path: str | None = None,
        start_timeout: float = 10.0,
        stop_grace: float = 3.0,
        merge_stderr: bool = False,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        """``env`` is added to this process's environment (with ``inherit_env=False`` it is the
        whole environment); ``workdir`` (default: a new temporary folder) holds the child's
        output files and is removed by ``stop()``; ``sock`` is handed to the child (its fd
        stays open across exec) and closed here once the child has it; ``merge_stderr`` sends
        both streams to one file (``stdout()``)."""
        self.argv = list(argv)
        self.name = name
        self.host = host
        self.port = port
        self.env = dict(env or {})
        self.inherit_env = inherit_env
        self.cwd = None if cwd is None else os.fspath(cwd)
        self.workdir = (
            workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="labkit-child-"))
        )
        self.sock = sock
        self.ready_path = ready_path
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.merge_stderr = merge_stderr
        self.preexec_fn = preexec_fn
        self.process: subprocess.Popen[bytes] | None = None
        #: Whether a start that fails removes ``workdir`` (keep it to inspect the failure).
        self.remove_on_failed_start = True
        self._kept = {"stdout": "", "stderr": ""}
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None and not self._stopped

    @property
    def logs(self) -> list[str]:
        """The child's stderr, line by line (its warnings, errors and tracebacks)."""
        return self.stderr().splitlines()

    def stdout(self) -> str:
        """Everything the child printed to stdout so far (and stderr, with ``merge_stderr``)."""
        return self._read("stdout")

    def stderr(self) -> str:
        """Everything the child printed to stderr so far."""
        return self._read("stdout" if self.merge_stderr else "stderr")

    def _read(self, stream: str) -> str:
        path = self.workdir / stream
        if path.exists():
            return path.read_text(encoding="utf-8", errors="replace")
        return self._kept[stream]

    def start(self) -> ProcessServer:
        """Start the child; return once it is ready. Raises ``ServerStartError``."""
        if self.process is not None:
            raise AlreadyStartedError(name=self.name, handle="server")
        inherited = dict(os.environ) if self.inherit_env else {}
        env = {**inherited, **self.env}
        fds = () if self.sock is None else (self.sock.fileno(),)
        try:
            with open(self.workdir / "stdout", "wb") as out:
                err = (
                    subprocess.STDOUT if self.merge_stderr else open(self.workdir / "stderr", "wb")
                )
                try:
                    self.process = subprocess.Popen(
                        self.command(),
                        cwd=self.cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                        pass_fds=fds,
                        preexec_fn=self.preexec_fn,
                    )
                finally:
                    if not isinstance(err, int):
                        err.close()
        except OSError as exc:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise self.spawn_error(exc) from None
        else:
            _reaper.watch(self.process.pid)  # its own session: its group is its pid
        finally:
            if self.sock is not None:
                self.sock.close()  # the child holds its own copy
        try:
            self.wait_ready()
        except BaseException:
            self._kill(remove=self.remove_on_failed_start)
            raise
        registry.add(self)
        return self

    def command(self) -> list[str]:
        """The command the child runs (a subclass may build it at start)."""
        return self.argv

    def wait_ready(self) -> None:
        """Return once ``ready()`` says so; raise if the child exits or the deadline passes."""
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.ready():
                return
            if self.process.poll() is not None:
                if self.ready():  # it reported, then exited
                    return
                raise self.exited_error()
            if time.monotonic() > deadline:
                raise StartTimeoutError(name=self.name, timeout=self.start_timeout)
            time.sleep(self.poll_interval)

    poll_interval = 0.01

    def ready(self) -> bool:
        """True once ``port`` accepts (and ``ready_path``, if given, answers 200)."""
        try:
            if self.ready_path is None:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return True
            url = f"{self.url}{self.ready_path}"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def spawn_error(self, exc: OSError) -> ServerStartError:
        """What a command that could not be started at all becomes."""
        return ServerStartError(
            f"{self.name!r} could not start {self.argv[0]}: {exc}. "
            "Check that the program exists and that cwd is an existing folder.",
            name=self.name,
        )

    def exited_error(self) -> ServerStartError:
        """What a child that exited before it was ready becomes."""
        assert self.process is not None
        return ServerExitedError(
            name=self.name,
            how=f"the server process exited with code {self.process.returncode}",
            stderr_tail=tail(self.stderr()),
        )

    def stop(self) -> None:
        """Stop the child (SIGTERM to its process group, SIGKILL if it lingers). Safe twice."""
        if self._stopped:
            return
        self._stopped = True
        self._kill()
        registry.discard(self)

    def _kill(self, *, remove: bool = True) -> None:
        process = self.process
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(self.stop_grace)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            # Children of the child (if any) get the same treatment, and stop() returns only
            # once they are gone: SIGKILL is delivered asynchronously, so a grandchild can still
            # be running for a moment after the signal is sent.
            _signal_group(process, signal.SIGKILL)
            _wait_for_group_to_die(process.pid, timeout=self.stop_grace)
            _reaper.forget(process.pid)
        self._kept = {"stdout": self._read("stdout"), "stderr": self._read("stderr")}
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_for_group_to_die(pgid: int, *, timeout: float) -> None:
    """Wait until no live process is left in group ``pgid`` (zombies count as dead: whoever
    adopted them reaps them, not us), or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while _group_has_live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _group_has_live_members(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False  # nobody left in the group, not even a zombie
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
