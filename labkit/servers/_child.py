"""Child side of ``serve_subprocess``: load a target, serve it, report back through a file.

Run as ``python -m labkit.servers._child --target T --ready-file F ...``. The child binds the socket
itself (port 0 by default) and, once uvicorn is serving, writes a ``ready``
:class:`~labkit.servers._status.ChildStatus` with the port to the ready file. If it cannot get
that far it writes the status that says why (``syntax_error``, ``import_error``, ``no_app``,
``load_error``, ``port_in_use``, ``start_failed``, ``startup_failed``, with the error and its
traceback), so the parent can raise the matching error with a plain message. How loading failed
is decided here, where the exception itself is at hand (by its class, or by where loading
stopped), and travels as that kind: nobody reads it back out of the message. Everything the
target prints goes to this process's stdout/stderr, which the parent keeps in files.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import uvicorn

from labkit._source import run_source
from labkit.errors import LoadFailure, PortInUseError, ServerStartError
from labkit.servers._handles import KEEP_ALIVE_S, bind_socket
from labkit.servers._status import ChildStatus

GRACEFUL_TIMEOUT = 1
_MISSING = object()  # the module has no attribute of the name to serve


def _summary(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def import_target(target: str) -> tuple[ModuleType, str, str]:
    """Import the module of ``/path/file.py[:attr]`` or ``package.module[:attr]``: the module,
    the attribute to serve (``app`` unless named) and the module's name to show in a message."""
    if ".py:" in target or target.endswith(".py"):
        file_part, _, attr = target.rpartition(":") if ".py:" in target else (target, "", "")
        attr = attr or "app"
        path = Path(file_part).resolve()
        sys.path.insert(0, str(path.parent))
        module_name = path.stem
        module = run_source(module_name, path)  # never a stale .pyc of an edited file
        shown = path.name
    else:
        module_name, _, attr = target.partition(":")
        attr = attr or "app"
        module = importlib.import_module(module_name)
        shown = module_name
    return module, attr, shown


def load_failure(exc: BaseException) -> LoadFailure:
    """How importing a target failed, by the class of what it raised: a typo (``SyntaxError``
    and its ``IndentationError``, ``TabError``), a missing import (``ImportError``, with
    ``ModuleNotFoundError``), or anything else the module raised."""
    if isinstance(exc, SyntaxError):
        return "syntax_error"
    if isinstance(exc, ImportError):
        return "import_error"
    return "load_error"


def _load_failed(ready_file: str, reason: LoadFailure, exc: BaseException) -> int:
    details = "".join(traceback.format_exception(exc))
    print(details, end="", file=sys.stderr)
    status = ChildStatus(reason, error=_summary(exc), exception=type(exc).__name__, details=details)
    status.write(ready_file)
    return 2


class _ErrorLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _watch(server: uvicorn.Server, ready_file: str, port: int, parent_pid: int) -> None:
    reported = False
    while not server.should_exit:
        if not reported and server.started:
            ChildStatus("ready", port=port, pid=os.getpid()).write(ready_file)
            reported = True
        if parent_pid and os.getppid() != parent_pid:  # the parent died without stopping us
            server.should_exit = True
        time.sleep(0.01 if not reported else 0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.servers._child")
    parser.add_argument("--target", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", required=True)
    # 0: do not watch the parent (a sandbox that dies with it runs us, and hides its pid)
    parser.add_argument("--parent-pid", type=int, default=os.getppid())
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    errors = _ErrorLines()
    logging.getLogger("uvicorn.error").addHandler(errors)

    try:
        module, attr, shown = import_target(args.target)
        app: Any = getattr(module, attr, _MISSING)
    except BaseException as exc:  # SyntaxError, ImportError, anything the module raises
        return _load_failed(args.ready_file, load_failure(exc), exc)
    if app is _MISSING:
        missing = AttributeError(
            f"{shown} has no module-level {attr!r} (define e.g. `{attr} = FastAPI()`)"
        )
        return _load_failed(args.ready_file, "no_app", missing)

    try:
        sock = bind_socket(args.host, args.port, name=args.name)
    except PortInUseError:
        ChildStatus("port_in_use").write(args.ready_file)
        return 2
    except ServerStartError as exc:
        ChildStatus("start_failed", error=str(exc)).write(args.ready_file)
        return 2
    port = sock.getsockname()[1]

    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="auto",
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    watcher = threading.Thread(
        target=_watch, args=(server, args.ready_file, port, args.parent_pid), daemon=True
    )
    watcher.start()
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:
        startup = next((line for line in errors.lines if "Traceback" in line), "")
        error = startup.strip().splitlines()[-1] if startup else f"uvicorn exit code {exc.code}"
        ChildStatus("startup_failed", error=error, details=startup).write(args.ready_file)
        return 3
    finally:
        server.should_exit = True
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
