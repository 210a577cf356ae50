"""Run an ASGI app on a real socket from a background thread.

``uvicorn.run()`` refuses to start inside a running event loop, and a Jupyter kernel is one. So
the server gets a thread of its own, and that thread owns an event loop running
``uvicorn.Server``. Three details make it behave in a notebook:

- We bind the socket (port 0 by default) and hand it to uvicorn, so the real port is known before
  uvicorn starts and a taken port is a clear error instead of uvicorn's ``sys.exit``.
- Startup has a deadline, and waiting for it also watches the thread: uvicorn ends the thread with
  ``sys.exit`` when the app's startup fails, and that must become an error, not a hang.
- uvicorn's log records from the server's thread are kept on the handle (``.logs``) instead of
  reaching stderr: nbval compares stderr, and with ipykernel 7 output from a background thread
  lands in whichever cell happens to run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any

import uvicorn

from labkit.errors import (
    AlreadyStartedError,
    AppStartupError,
    ServerExitedError,
    StartTimeoutError,
)
from labkit.servers._handles import KEEP_ALIVE_S, ServerHandle, bind_socket, registry

__all__ = ["DEFAULT_GRACEFUL_TIMEOUT", "DEFAULT_START_TIMEOUT", "ThreadServer"]

DEFAULT_START_TIMEOUT = 5.0
#: Seconds uvicorn waits for open responses before cancelling them on stop.
DEFAULT_GRACEFUL_TIMEOUT = 1
_LOG_FORMAT = logging.Formatter("%(levelname)s %(name)s: %(message)s")
_ROUTED_LOGGERS = ("uvicorn.error", "uvicorn.access", "uvicorn.asgi", "asyncio")
_MAX_LOG_LINES = 500


class _LogRouter(logging.Filter):
    """Diverts log records made on a server's thread to that server's ``.logs``.

    A filter on uvicorn's loggers (and asyncio's) while at least one server thread runs, and on
    none once the last has stopped: records from other threads pass through untouched, so
    nothing changes for uvicorn used elsewhere in the process.
    """

    def __init__(self) -> None:
        super().__init__()
        self._targets: dict[int, deque[str]] = {}
        self._lock = threading.Lock()

    @property
    def installed(self) -> bool:
        return all(self in logging.getLogger(name).filters for name in _ROUTED_LOGGERS)

    def route(self, thread_id: int, lines: deque[str]) -> None:
        with self._lock:
            if not self._targets:
                for name in _ROUTED_LOGGERS:
                    logging.getLogger(name).addFilter(self)
            self._targets[thread_id] = lines

    def unroute(self, thread_id: int) -> None:
        with self._lock:
            self._targets.pop(thread_id, None)
            if not self._targets:
                for name in _ROUTED_LOGGERS:
                    logging.getLogger(name).removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        lines = self._targets.get(record.thread or 0)
        if lines is None:
            return True
        lines.append(_LOG_FORMAT.format(record))
        return False


_router = _LogRouter()


class ThreadServer(ServerHandle):
    """An ASGI app served by uvicorn on a background thread. Use ``serve()`` to make one."""

    def __init__(
        self,
        app: Any,
        *,
        name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        graceful_timeout: int = DEFAULT_GRACEFUL_TIMEOUT,
    ) -> None:
        self.app = app
        self.name = name
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self._logs: deque[str] = deque(maxlen=_MAX_LOG_LINES)
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="auto",
            timeout_graceful_shutdown=graceful_timeout,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._exit: BaseException | None = None
        self._stopped = False

    @property
    def logs(self) -> list[str]:
        """Warnings and errors uvicorn logged for this server (tracebacks included)."""
        return list(self._logs)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and self._server.started

    def start(self) -> ThreadServer:
        """Start serving; return once requests are accepted. Raises ``ServerStartError``."""
        if self._thread is not None:
            raise AlreadyStartedError(name=self.name, handle="ThreadServer")
        sock = bind_socket(self.host, self.port, name=self.name)
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(sock, ready), name=f"labkit:{self.name}", daemon=True
        )
        self._thread.start()
        ready.wait()
        try:
            self._wait_started()
        except BaseException:
            self._shutdown()
            sock.close()
            raise
        registry.add(self)
        return self

    def _run(self, sock: Any, ready: threading.Event) -> None:
        thread_id = threading.get_ident()
        _router.route(thread_id, self._logs)
        ready.set()
        try:
            with asyncio.Runner(loop_factory=self._config.get_loop_factory()) as runner:
                runner.run(self._serve(sock))
        except BaseException as exc:  # SystemExit from uvicorn, CancelledError from stop()
            self._exit = exc
        finally:
            sock.close()
            _router.unroute(thread_id)

    async def _serve(self, sock: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        await self._server.serve(sockets=[sock])

    def _wait_started(self) -> None:
        assert self._thread is not None
        deadline = time.monotonic() + self.start_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise self._start_failure()
            if time.monotonic() > deadline:
                raise StartTimeoutError(name=self.name, timeout=self.start_timeout)
            time.sleep(0.005)

    def _start_failure(self) -> Exception:
        startup_error = next((line for line in self._logs if "Traceback" in line), None)
        if startup_error is not None:
            last = startup_error.strip().splitlines()[-1]
            return AppStartupError(name=self.name, error=last, details=startup_error)
        if isinstance(self._exit, SystemExit):
            how = f"the server thread exited (uvicorn exit code {self._exit.code})"
        else:
            how = f"the server thread ended with {self._exit!r}"
        return ServerExitedError(
            name=self.name, how=how, stderr_tail="\n".join(self._logs), source="log"
        )

    def stop(self) -> None:
        """Stop serving and wait for the thread to end (open streams get ~1 s, then cut)."""
        if self._stopped:
            return
        self._stopped = True
        self._shutdown()
        registry.discard(self)

    def _shutdown(self) -> None:
        thread = self._thread
        if thread is None:
            return
        if self._server.started:
            self._server.should_exit = True
            grace = float(self._config.timeout_graceful_shutdown or 0)
            thread.join(grace + 2.0)
        if thread.is_alive():
            # Still starting (a lifespan that never finishes) or stuck: cancel it outright.
            self._server.should_exit = self._server.force_exit = True
            loop, task = self._loop, self._task
            if loop is not None and task is not None and not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
            thread.join(2.0)
