"""A network between the browser and a server that drops every connection when told to.

A blip (Wi-Fi gone for a moment, a NAT or a load balancer restarting) ends the TCP connections
open through it, while the servers on both sides stay up and a new connection gets through at
once. :class:`FlakyNetwork` is a TCP forwarder to one server, on a port of its own, that does
that on demand::

    with FlakyNetwork(proxy.url, name="blip") as network:
        tab = browser.open(network.url + "/chat/")   # the browser reaches the proxy through it
        ...
        network.drop()   # every open connection ends, at both ends; the next one gets through

It runs its own event loop on a thread, so it works the same in a Jupyter kernel (whose main
thread has a loop) and in pytest. It forwards bytes as they come and reads nothing in them.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from labkit.errors import ServerStartError, StartTimeoutError
from labkit.servers import ServerHandle, bind_socket

__all__ = ["FlakyNetwork"]

START_TIMEOUT_S: Final = 5.0
#: Bytes read from one side before they are written to the other.
PIECE_BYTES: Final = 65536


@dataclass(eq=False)
class _Connection:
    """One browser connection and the connection to the server made for it."""

    near: asyncio.StreamWriter  # to the browser
    far: asyncio.StreamWriter  # to the server

    def cut(self) -> None:
        self.near.transport.abort()  # closed at once: nothing buffered is sent any more
        self.far.transport.abort()


class FlakyNetwork(ServerHandle):
    """A TCP forwarder from ``.url`` to ``target_url`` whose :meth:`drop` closes every
    connection open through it, both sockets of each, while new connections go on working.
    Starts at once; use it as a context manager or call :meth:`stop`."""

    def __init__(
        self,
        target_url: str,
        *,
        name: str = "flaky-network",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        target = urlsplit(target_url)
        if target.scheme != "http" or not target.hostname or not target.port:
            raise ServerStartError(
                f"FlakyNetwork forwards to a plain-HTTP server with a port, like "
                f"http://127.0.0.1:8000; got {target_url!r}. Pass the server's .url.",
                name=name,
            )
        self.name, self.host = name, host
        self.target = (target.hostname, target.port)
        self._open: set[_Connection] = set()
        self._forwarding: set[asyncio.Task[None]] = set()
        self._made = 0
        self._drops = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None
        self._started = threading.Event()
        sock = bind_socket(host, port, name=name)
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name=f"labkit:{name}", daemon=True
        )
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            self.stop()
            raise StartTimeoutError(name=name, timeout=START_TIMEOUT_S)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self._started.is_set()

    @property
    def connections_made(self) -> int:
        """How many connections the browser has opened through the network so far."""
        return self._made

    @property
    def open_connections(self) -> int:
        """How many of them are open now."""
        return len(self._open)

    @property
    def drops(self) -> int:
        """How many connections :meth:`drop` has closed so far."""
        return self._drops

    def drop(self) -> int:
        """Close every connection open through the network now, the browser's socket and the
        server's; return how many. Connections opened afterwards go through as before."""
        loop = self._loop
        if loop is None or not self.running:
            return 0
        return asyncio.run_coroutine_threadsafe(self._drop(), loop).result(START_TIMEOUT_S)

    async def _drop(self) -> int:
        cut = self._cut_all()
        self._drops += cut
        return cut

    def _cut_all(self) -> int:
        cut, self._open = self._open, set()
        for connection in cut:
            connection.cut()
        return len(cut)

    def stop(self) -> None:
        """Close every connection and the listening socket; wait for the thread to end."""
        loop, done = self._loop, self._done
        if loop is not None and done is not None and not loop.is_closed():
            loop.call_soon_threadsafe(done.set)
        self._thread.join(START_TIMEOUT_S)

    def _run(self, sock: socket.socket) -> None:
        try:
            asyncio.run(self._serve(sock))
        finally:
            sock.close()

    async def _serve(self, sock: socket.socket) -> None:
        self._loop, self._done = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._forward, sock=sock)
        self._started.set()
        try:
            await self._done.wait()
        finally:
            server.close()
            self._cut_all()
            if self._forwarding:  # each ends once its sockets are cut
                await asyncio.wait(self._forwarding, timeout=START_TIMEOUT_S)
            await server.wait_closed()

    async def _forward(self, near_in: asyncio.StreamReader, near: asyncio.StreamWriter) -> None:
        self._made += 1
        task = asyncio.current_task()
        if task is not None:
            self._forwarding.add(task)
        try:
            await self._join(near_in, near)
        except asyncio.CancelledError:
            # Only when the loop shuts down anyway. Python 3.11's start_server logs a cancelled
            # connection task as an error (it asks the task for its exception): end quietly.
            near.transport.abort()
        finally:
            self._forwarding.discard(task)

    async def _join(self, near_in: asyncio.StreamReader, near: asyncio.StreamWriter) -> None:
        try:
            far_in, far = await asyncio.open_connection(*self.target)
        except OSError:
            near.transport.abort()  # the server is down: the browser sees a refused connection
            return
        connection = _Connection(near, far)
        self._open.add(connection)
        if self._done is not None and self._done.is_set():
            connection.cut()  # connected while the network was stopping
        try:
            # Either side ending ends the other: each copy closes what it writes to.
            await asyncio.gather(_copy(near_in, far), _copy(far_in, near))
        finally:
            self._open.discard(connection)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Forward ``source`` to ``sink`` until it ends, then close ``sink`` (after what is
    buffered: only a cut drops bytes)."""
    try:
        while piece := await source.read(PIECE_BYTES):
            sink.write(piece)
            await sink.drain()
    except OSError:  # reset, or cut by drop(): the sink is closed below either way
        pass
    finally:
        sink.close()
