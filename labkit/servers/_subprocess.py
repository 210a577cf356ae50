"""Run an ASGI app in a child Python process (isolation for code we do not trust to behave).

The grader serves each learner's ``proxy.py`` this way: a crash, a blocking call or an
``os._exit`` in it cannot take the caller down, and ``stop()`` kills the child's whole process
group. The child (``python -m labkit.servers._child``) binds port 0 and reports the real port,
or the reason it could not start, as one typed :class:`~labkit.servers._status.ChildStatus` in a
file; each kind but ``ready`` maps to an error class (``_START_ERRORS``), and a target that
could not be loaded keeps its kind as ``TargetLoadError.reason``. Its stdout and stderr
go to files that the handle keeps (``.stderr()``), so a failed start can quote the end of the
child's stderr. Starting, waiting and stopping are :class:`ProcessServer`'s.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

from labkit.errors import (
    AppStartupError,
    InvalidTargetError,
    LoadFailure,
    PortInUseError,
    ServerStartError,
    TargetLoadError,
)
from labkit.servers._process import ProcessServer
from labkit.servers._status import LOAD_FAILURES, ChildStatus, Kind

__all__ = [
    "CHILD_MODULE",
    "DEFAULT_SUBPROCESS_START_TIMEOUT",
    "SubprocessServer",
    "resolve_target",
]

DEFAULT_SUBPROCESS_START_TIMEOUT = 10.0
#: What the child runs: ``python -m labkit.servers._child`` (the sandbox looks for it).
CHILD_MODULE = "labkit.servers._child"
_STOP_GRACE_S = 3.0
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


class SubprocessServer(ProcessServer):
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
        super().__init__(
            [sys.executable, "-m", CHILD_MODULE],
            name=name,
            host=host,
            port=port,
            env={**(env or {}), "PYTHONUNBUFFERED": "1"},
            inherit_env=inherit_env,
            cwd=cwd,
            start_timeout=start_timeout,
            stop_grace=_STOP_GRACE_S,
        )
        self._ready_file = self.workdir / "ready.json"
        self._status: ChildStatus | None = None

    def start(self) -> SubprocessServer:
        """Start the child; return once it serves. Raises ``ServerStartError``."""
        super().start()
        return self

    def command(self) -> list[str]:
        command = [
            *self.argv,
            "--target",
            self.target,
            "--name",
            self.name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--ready-file",
            str(self._ready_file),
            "--parent-pid",
            # A sandbox kills the child when we die (and hides our pid from it): no watching.
            "0" if self.wrap is not None else str(os.getpid()),
        ]
        return command if self.wrap is None else self.wrap(command, self.workdir)

    def spawn_error(self, exc: OSError) -> ServerStartError:
        return ServerStartError(
            f"{self.name!r} could not start a Python process: {exc}. "
            "Check that cwd is an existing folder.",
            name=self.name,
        )

    def ready(self) -> bool:
        """True once the child reported ``ready`` (with its port); raises the error for any
        other status it reported."""
        try:
            status = ChildStatus.read(self._ready_file)
        except ValueError as exc:
            raise ServerStartError(f"{self.name!r} did not start: {exc}", name=self.name) from None
        if status is None:
            return False
        if status.kind != "ready":
            raise _START_ERRORS[status.kind](self, status)
        self.port = status.port
        return True


def _target_load_error(server: SubprocessServer, status: ChildStatus) -> ServerStartError:
    """A target that could not be loaded, with how (the status's kind) carried as data."""
    target = server.target
    shown = target.rpartition(":")[0] if ".py:" in target else target
    reason = cast(LoadFailure, status.kind)  # _START_ERRORS sends only these kinds here
    return TargetLoadError(
        name=server.name,
        target=shown,
        error=status.error,
        reason=reason,
        details=status.details,
        exception=status.exception,
    )


# What each way a child's start can fail becomes in the parent.
_START_ERRORS: dict[Kind, Callable[[SubprocessServer, ChildStatus], ServerStartError]] = {
    "port_in_use": lambda server, _status: PortInUseError(
        name=server.name, host=server.host, port=server.port
    ),
    **dict.fromkeys(LOAD_FAILURES, _target_load_error),
    "startup_failed": lambda server, status: AppStartupError(
        name=server.name, error=status.error, details=status.details
    ),
    "start_failed": lambda server, status: ServerStartError(
        status.error or f"{server.name!r} did not start: it could not bind its socket",
        name=server.name,
    ),
}
