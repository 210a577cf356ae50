"""Every server this project starts turns Nagle's algorithm off on the connections it accepts.

asyncio sets ``TCP_NODELAY`` only on an accepted socket that says it is TCP (family
``AF_INET``/``AF_INET6`` and protocol ``IPPROTO_TCP``). A listening socket made with protocol 0,
or uvicorn's ``--fd`` (which wraps any descriptor as ``AF_UNIX``), leaves Nagle on, and a small
write after another on a kept-alive connection waits for the peer's delayed ACK (about 40 ms):
the bench measured it as a fast first token held to 40-49 ms through the aiohttp proxy.

The served app below reports the option as its own connection has it: it finds the socket
whose peer is the request's client among this process's descriptors.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from bench.configs import uvicorn_argv
from labkit.servers import ProcessServer, bind_socket

pytestmark = pytest.mark.sockets

REPORTS_NODELAY = """
import os, socket

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    value = b"no socket"
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with sock:
            try:
                if sock.getpeername()[:2] == tuple(scope["client"]):
                    value = b"%d" % sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            except OSError:
                pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": value})
"""


async def _nodelay_of_accepted(listener: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    seen: asyncio.Future[int] = loop.create_future()

    class Report(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Report, sock=listener)
    _reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
    try:
        return await asyncio.wait_for(seen, 5)
    finally:
        writer.close()
        server.close()


def test_connections_accepted_on_bind_socket_have_nagle_off() -> None:
    listener = bind_socket("127.0.0.1", 0, name="nodelay")
    assert asyncio.run(_nodelay_of_accepted(listener)) == 1


def test_a_listening_socket_without_its_protocol_leaves_nagle_on() -> None:
    # Why bind_socket names IPPROTO_TCP: asyncio's rule, which uvicorn issue #3149 reports.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    assert asyncio.run(_nodelay_of_accepted(listener)) == 0


def _served_nodelay(argv_for: Callable[[int], list[str]], tmp_path: Path) -> str:
    """What the app reports when ``argv_for(fd)`` serves it on the listening socket ``fd``."""
    (tmp_path / "reports_nodelay.py").write_text(REPORTS_NODELAY)
    sock = bind_socket("127.0.0.1", 0, name="nodelay-served")
    server = ProcessServer(
        argv_for(sock.fileno()),
        name="nodelay-served",
        port=sock.getsockname()[1],
        env={"PYTHONPATH": str(tmp_path)},
        sock=sock,
        ready_path="/",
    )
    with server.start():
        return httpx.get(server.url + "/", timeout=10).text


def test_the_bench_serves_uvicorn_with_nagle_off(tmp_path: Path) -> None:
    served = _served_nodelay(lambda fd: uvicorn_argv("reports_nodelay:app", fd, False), tmp_path)
    assert served == "1"


def test_uvicorns_own_fd_option_leaves_nagle_on(tmp_path: Path) -> None:
    # What bench.serve is for: if this starts to pass as "1", uvicorn fixed --fd and the bench
    # could go back to it.
    def argv_for(fd: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "reports_nodelay:app",
            "--fd",
            str(fd),
            "--log-level",
            "warning",
        ]

    assert _served_nodelay(argv_for, tmp_path) == "0"
