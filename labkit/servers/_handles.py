"""What every running server looks like to a caller, and the process-wide list of them.

A handle has a name, a host and port, a ``url`` (no ``/v1``), ``stop()`` and works as a context
manager. The registry exists for two behaviours the notebooks need: starting a server under a
name that is already running stops the old one first (so re-running a cell replaces it), and
everything still running is stopped when the interpreter exits. Both are about the process (a
kernel outlives every cell), so the registry is the process's, and private to this package:
callers see it through ``labkit.running_servers()`` and ``labkit.stop_all()``.
"""

from __future__ import annotations

import atexit
import errno
import itertools
import socket
import threading
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

from labkit.errors import PortInUseError, ServerStartError

__all__ = ["ExternalServer", "ServerHandle", "bind_socket"]


class ServerHandle(ABC):
    """A server you can reach at ``.url`` and stop with ``.stop()``."""

    name: str
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL such as ``http://127.0.0.1:8001`` (no trailing slash, no ``/v1``)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The process that serves, when it is a child of ours (to meter or signal it)."""
        return None

    @property
    @abstractmethod
    def running(self) -> bool:
        """True while the server accepts connections."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server. Safe to call more than once."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__.lstrip('_')} {self.name!r} {self.url} {state}>"


class ExternalServer(ServerHandle):
    """A server someone else runs (for example the one named by ``LABKIT_UPSTREAM_URL``).

    ``stop()`` does nothing: we did not start it, so we do not stop it.
    """

    def __init__(self, url: str, *, name: str) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerStartError(
                f"Expected a URL like http://127.0.0.1:8001 for {name!r}, got {url!r}. "
                "Fix the URL (no /v1 suffix needed).",
                name=name,
            )
        self.name = name
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._url = f"{parts.scheme}://{parts.netloc}"

    @property
    def url(self) -> str:
        return self._url

    @property
    def running(self) -> bool:
        return True

    def stop(self) -> None:
        return None


KEEP_ALIVE_S = 75
"""How long the servers labkit starts keep an idle connection open (uvicorn's default is 5 s).

A server must keep idle connections longer than its clients do, or a client reuses a pooled
connection at the moment the server closes it, and that request fails before it was sent.
httpx keeps idle connections for 5 s: against uvicorn's 5 s, one stream of 110 in the grader's
``concurrency`` check, sent about 5 s after the streams before it, was lost that way at half a
CPU. 75 s is nginx's default ``keepalive_timeout``."""


def bind_socket(host: str, port: int, *, name: str) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: the OS picks a free one).

    We bind ourselves instead of letting uvicorn do it: a taken port is then a clear
    ``PortInUseError`` here, not a ``sys.exit`` inside uvicorn's startup.

    The protocol is named (``IPPROTO_TCP``, not the default 0) because the sockets accepted
    from it inherit it, and asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only on a
    socket that says it is TCP. With 0, every small write after the first on a connection
    waits for the peer's delayed ACK: a fast first token arrived about 40 ms late.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(name=name, host=host, port=port) from None
        raise ServerStartError(
            f"{name!r} could not start on {host}:{port}: {exc.strerror or exc}. "
            "Use host='127.0.0.1' and port=0 unless you need something else.",
            name=name,
        ) from None
    sock.set_inheritable(False)
    return sock


class _Registry:
    """Live servers of this process: by name (for replacement) and all (for exit cleanup)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._named: dict[str, ServerHandle] = {}
        self._live: list[ServerHandle] = []
        self._counter = itertools.count(1)
        self._atexit_installed = False

    def next_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._counter)}"

    def get(self, name: str) -> ServerHandle | None:
        with self._lock:
            return self._named.get(name)

    def add(self, handle: ServerHandle) -> None:
        with self._lock:
            if not self._atexit_installed:
                atexit.register(self.stop_all)
                self._atexit_installed = True
            self._named[handle.name] = handle
            self._live.append(handle)

    def discard(self, handle: ServerHandle) -> None:
        with self._lock:
            if self._named.get(handle.name) is handle:
                del self._named[handle.name]
            if handle in self._live:
                self._live.remove(handle)

    def live(self) -> list[ServerHandle]:
        with self._lock:
            return list(self._live)

    def stop_all(self) -> None:
        for handle in reversed(self.live()):
            handle.stop()


registry = _Registry()
