"""A private Redis on loopback, for notebook 15 (resumable streams) and its tests.

``start_redis()`` runs ``redis-server`` as a child process (a
:class:`~labkit.servers.ProcessServer`) bound to 127.0.0.1 on a free port, keeping nothing on
disk (``--save "" --appendonly no``, its ``--dir`` a temporary folder of its own), and returns
once it answers PING. ``.url`` is ``redis://127.0.0.1:PORT/0``, what ``redis.asyncio.from_url``
takes. Use it as a context manager, or call ``stop()``.

Two more verbs make the failures a lesson needs. ``kill()`` ends it with SIGKILL, as a crash or
the OOM killer would: every connection is reset at once, and with nothing persisted its data is
gone. ``restart()`` then starts an empty one on the same port, so clients that hold the URL find
it again on their next command. Which client settings notice a dead Redis within a bound is the
lesson's, not this module's (docs/redis.md has the measurements).

redis-server cannot take a listening socket from us (nginx can), so the port is chosen by
binding port 0 here and closing it; redis-server binds it a moment later. Should another process
take it in between, ``start()`` tries another free port; ``restart()``, bound to its port,
raises ``PortInUseError``. When redis-server is not installed, :class:`RedisNotFoundError` says
how to install it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from labkit.errors import (
    REDIS_INSTALL_HINT,
    AlreadyStartedError,
    PortInUseError,
    RedisNotFoundError,
    ServerExitedError,
)
from labkit.servers import _reaper
from labkit.servers._handles import bind_socket, registry
from labkit.servers._process import ProcessServer

__all__ = [
    "INSTALL_HINT",
    "RedisNotFoundError",
    "RedisServer",
    "find_redis_server",
    "redis_version",
    "start_redis",
]

INSTALL_HINT: Final = REDIS_INSTALL_HINT
DEFAULT_START_TIMEOUT: Final = 5.0
#: Free ports tried by a first start whose port another process took before redis-server bound it.
PORT_ATTEMPTS: Final = 3
_SEARCH_PATH: Final = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/opt/homebrew/bin")
_PING_TIMEOUT: Final = 0.5
_PORT_TAKEN: Final = "Address already in use"


def find_redis_server() -> str:
    """The path of redis-server; raises :class:`RedisNotFoundError` if there is none."""
    found = shutil.which("redis-server")
    if found:
        return found
    for folder in _SEARCH_PATH:
        candidate = Path(folder) / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise RedisNotFoundError()


def redis_version() -> str:
    """``7.0.15`` or similar (from ``redis-server --version``)."""
    done = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, timeout=10, check=False
    )
    for word in done.stdout.split():
        if word.startswith("v="):
            return word.removeprefix("v=")
    return done.stdout.strip()


class RedisServer(ProcessServer):
    """One redis-server on 127.0.0.1, persisting nothing, that can be killed and restarted."""

    def __init__(
        self,
        *,
        name: str = "redis",
        port: int = 0,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        options: Sequence[str] = (),
    ) -> None:
        """``port=0`` picks a free port at ``start()``; a later ``restart()`` keeps it.
        ``options``: more redis-server arguments, after ours (``["--maxmemory", "64mb"]``)."""
        super().__init__(
            [],
            name=name,
            host="127.0.0.1",
            port=port,
            start_timeout=start_timeout,
            merge_stderr=True,
        )
        self.poll_interval = 0.02
        self.options = list(options)
        #: How many times redis-server was started (1 after ``start()``, 2 after a restart...).
        self.starts = 0

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        return [
            *self.argv,
            "--bind", self.host,
            "--port", str(self.port),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--daemonize", "no",
            "--logfile", "",
            *self.options,
        ]  # fmt: skip

    def ready(self) -> bool:
        """redis-server answers PING (it listens, and has finished starting)."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis(
            host=self.host,
            port=self.port,
            socket_connect_timeout=_PING_TIMEOUT,
            socket_timeout=_PING_TIMEOUT,
            retry=Retry(NoBackoff(), 0),  # one try per poll: the poll loop is the retry
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start(self) -> RedisServer:
        """Start redis-server; return once it answers PING. Raises ``RedisNotFoundError``,
        ``PortInUseError`` or another ``ServerStartError`` (with the end of its log)."""
        if self.running:
            raise AlreadyStartedError(name=self.name, handle="RedisServer")
        self.argv = [find_redis_server()]
        if self.port != 0:
            return self._launch()
        tries = PORT_ATTEMPTS
        while True:
            sock = bind_socket(self.host, 0, name=self.name)
            self.port = sock.getsockname()[1]
            sock.close()  # redis-server binds it itself, a moment later
            try:
                return self._launch()
            except PortInUseError:
                tries -= 1
                if tries == 0:
                    raise

    def _launch(self) -> RedisServer:
        # A handle is started more than once (restart), so the run before is forgotten first.
        registry.discard(self)
        self.process = None
        self._stopped = False
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            super().start()
        except ServerExitedError:
            if _PORT_TAKEN in self.stdout():
                raise PortInUseError(name=self.name, host=self.host, port=self.port) from None
            raise
        self.starts += 1
        return self

    def kill(self) -> None:
        """End redis-server with SIGKILL, as a crash would; returns once it is gone. Its
        clients' connections are reset and its data is lost. Does nothing if it is not running.
        ``restart()`` brings it back; ``stop()`` still cleans up."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: start_new_session
        except ProcessLookupError:
            pass
        process.wait()
        _reaper.forget(process.pid)

    def restart(self) -> RedisServer:
        """Start a new, empty redis-server on the same port (killing the running one first);
        return once it answers PING. Raises ``PortInUseError`` if another process took the
        port meanwhile."""
        self.kill()
        return self.start()


def start_redis(
    *,
    name: str = "redis",
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> RedisServer:
    """Run a private redis-server on a free 127.0.0.1 port; return once it answers PING.

    Its ``.url`` is ``redis://127.0.0.1:PORT/0``. Nothing is persisted. Starting again under
    the same ``name`` stops the old one first; everything still running is stopped when the
    interpreter exits. Raises :class:`RedisNotFoundError` when redis-server is not installed.
    """
    find_redis_server()
    current = registry.get(name)
    if current is not None:
        current.stop()
    return RedisServer(name=name, start_timeout=start_timeout).start()
