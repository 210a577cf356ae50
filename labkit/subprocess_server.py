"""Run an ASGI app in a child Python process (isolation for code we do not trust to behave).

The grader serves each learner's ``proxy.py`` this way: a crash, a blocking call or an
``os._exit`` in it cannot take the caller down, and ``stop()`` kills the child's whole process
group. The child (``labkit._serve_child``) binds port 0 and reports the real port, or the reason
it could not start, through a small JSON file; its stdout and stderr go to files that the handle
keeps (``.stderr()``), so a failed start can quote the end of the child's stderr.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from labkit._child_status import ChildStatus, Kind
from labkit.errors import (
    AppStartupError,
    InvalidTargetError,
    PortInUseError,
    ServerExitedError,
    ServerStartError,
    StartTimeoutError,
    TargetLoadError,
)
from labkit.handles import ServerHandle, registry

__all__ = ["DEFAULT_SUBPROCESS_START_TIMEOUT", "SubprocessServer", "resolve_target"]

DEFAULT_SUBPROCESS_START_TIMEOUT = 10.0
_STOP_GRACE_S = 3.0
_STDERR_TAIL_LINES = 15
_MODULE_TARGET = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*(:[A-Za-z_][\w]*)?$")


def resolve_target(target: str, cwd: str | os.PathLike[str] | None = None) -> str:
    """Check a target and make a file path absolute (relative paths are taken from ``cwd``)."""
    if ".py:" in target or target.endswith(".py"):
        file_part, sep, attr = target.rpartition(":") if ".py:" in target else (target, "", "")
        path = Path(file_part)
        if not path.is_absolute():
            path = Path(cwd if cwd is not None else os.getcwd()) / path
        if not path.is_file():
            raise InvalidTargetError(target, f"there is no file {path}")
        return f"{path.resolve()}{sep}{attr}"
    if not _MODULE_TARGET.match(target):
        raise InvalidTargetError(target, "it is neither a .py file nor a dotted module name")
    return target


def _tail(text: str, lines: int = _STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class SubprocessServer(ServerHandle):
    """An ASGI app served by uvicorn in a child process. Use ``serve_subprocess()``."""

    def __init__(
        self,
        target: str,
        *,
        name: str,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout: float = DEFAULT_SUBPROCESS_START_TIMEOUT,
        inherit_env: bool = True,
        wrap: Callable[[list[str], Path], list[str]] | None = None,
    ) -> None:
        self.target = resolve_target(target, cwd)
        # ``wrap(command, own_dir)`` returns the command that runs it (a sandbox around it);
        # ``own_dir`` holds the child's ready file and must stay writable for it.
        self.wrap = wrap
        self.name = name
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self.env = dict(env or {})
        self.inherit_env = inherit_env
        self.cwd = None if cwd is None else os.fspath(cwd)
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="labkit-child-"))
        self._stdout_text = ""
        self._stderr_text = ""
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
        """Everything the child printed to stdout so far."""
        return self._read("stdout", self._stdout_text)

    def stderr(self) -> str:
        """Everything the child printed to stderr so far."""
        return self._read("stderr", self._stderr_text)

    def _read(self, stream: str, kept: str) -> str:
        path = self._dir / stream
        if path.exists():
            return path.read_text(encoding="utf-8", errors="replace")
        return kept

    def start(self) -> SubprocessServer:
        """Start the child; return once it serves. Raises ``ServerStartError``."""
        ready_file = self._dir / "ready.json"
        command = [
            sys.executable,
            "-m",
            "labkit._serve_child",
            "--target",
            self.target,
            "--name",
            self.name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--ready-file",
            str(ready_file),
            "--parent-pid",
            # A sandbox kills the child when we die (and hides our pid from it): no watching.
            "0" if self.wrap is not None else str(os.getpid()),
        ]
        if self.wrap is not None:
            command = self.wrap(command, self._dir)
        inherited = dict(os.environ) if self.inherit_env else {}
        env = {**inherited, **self.env, "PYTHONUNBUFFERED": "1"}
        with (
            open(self._dir / "stdout", "wb") as out,
            open(self._dir / "stderr", "wb") as err,
        ):
            try:
                self.process = subprocess.Popen(
                    command,
                    cwd=self.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                shutil.rmtree(self._dir, ignore_errors=True)
                raise ServerStartError(
                    f"{self.name!r} could not start a Python process: {exc}. "
                    "Check that cwd is an existing folder.",
                    name=self.name,
                ) from None
        try:
            self.port = self._wait_ready(ready_file)
        except BaseException:
            self._kill()
            raise
        registry.add(self)
        return self

    def _wait_ready(self, ready_file: Path) -> int:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            report = self._read_report(ready_file)
            if report is not None:
                return self._port_from(report)
            if self.process.poll() is not None:
                report = self._read_report(ready_file)
                if report is not None:
                    return self._port_from(report)
                raise ServerExitedError(
                    name=self.name,
                    how=f"the server process exited with code {self.process.returncode}",
                    stderr_tail=_tail(self.stderr()),
                )
            if time.monotonic() > deadline:
                raise StartTimeoutError(name=self.name, timeout=self.start_timeout)
            time.sleep(0.01)

    def _read_report(self, ready_file: Path) -> ChildStatus | None:
        try:
            return ChildStatus.read(ready_file)
        except ValueError as exc:
            raise ServerStartError(f"{self.name!r} did not start: {exc}", name=self.name) from None

    def _port_from(self, status: ChildStatus) -> int:
        if status.kind == "ready":
            return status.port
        raise _START_ERRORS[status.kind](self, status)

    def stop(self) -> None:
        """Stop the child (SIGTERM to its process group, SIGKILL if it lingers)."""
        if self._stopped:
            return
        self._stopped = True
        self._kill()
        registry.discard(self)

    def _kill(self) -> None:
        process = self.process
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            # Children of the child (if any) get the same treatment.
            _signal_group(process, signal.SIGKILL)
        self._stdout_text = self.stdout()
        self._stderr_text = self.stderr()
        shutil.rmtree(self._dir, ignore_errors=True)


def _target_load_error(server: SubprocessServer, status: ChildStatus) -> ServerStartError:
    target = server.target
    shown = target.rpartition(":")[0] if ".py:" in target else target
    return TargetLoadError(
        name=server.name,
        target=shown,
        error=status.error,
        details=status.details,
        exception=status.exception,
    )


# What each way a child's start can fail becomes in the parent.
_START_ERRORS: dict[Kind, Callable[[SubprocessServer, ChildStatus], ServerStartError]] = {
    "port_in_use": lambda server, _status: PortInUseError(
        name=server.name, host=server.host, port=server.port
    ),
    "load_error": _target_load_error,
    "startup_failed": lambda server, status: AppStartupError(
        name=server.name, error=status.error, details=status.details
    ),
    "bind_error": lambda server, status: ServerStartError(
        status.error or f"{server.name!r} did not start: it could not bind its socket",
        name=server.name,
    ),
}


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
