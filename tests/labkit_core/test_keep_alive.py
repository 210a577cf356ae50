"""The servers labkit starts keep an idle connection longer than httpx's pool keeps it.

Otherwise a client reuses a pooled connection at the moment the server closes it, and the request
is lost before it was sent: one stream in 110 of the grader's ``concurrency`` check, at half a
CPU, with uvicorn's 5 s against httpx's 5 s. Here a connection idle for longer than httpx's
expiry must still answer a second request on the same socket: with uvicorn's default the server
has closed it by then.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from fastapi import FastAPI

from labkit import serve, serve_subprocess
from labkit.servers._handles import KEEP_ALIVE_S

HTTPX_EXPIRY_S = httpx.Limits().keepalive_expiry or 0.0
IDLE_S = HTTPX_EXPIRY_S + 1.5
REQUEST = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"

app = FastAPI()


@app.get("/ok")
def ok() -> dict[str, bool]:
    return {"ok": True}


BODY = b'{"ok":true}'


def _response(sock: socket.socket) -> bytes:
    """One whole response (headers and body may come in separate reads); b"" if closed."""
    data = b""
    while not data.endswith(BODY):
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


def _two_requests_apart(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(REQUEST)
        assert b"200 OK" in _response(sock)
        time.sleep(IDLE_S)
        try:
            sock.sendall(REQUEST)
            return _response(sock)
        except OSError:
            return b""


def test_the_keep_alive_outlasts_httpxs_pool_by_far() -> None:
    assert KEEP_ALIVE_S >= 10 * HTTPX_EXPIRY_S


@pytest.mark.sockets
def test_a_thread_server_answers_on_a_connection_idle_past_httpxs_expiry() -> None:
    with serve(app, name="keep-alive") as server:
        assert b"200 OK" in _two_requests_apart(server.port)


@pytest.mark.sockets
def test_a_child_server_answers_on_a_connection_idle_past_httpxs_expiry() -> None:
    with serve_subprocess("tests.labkit_core.test_keep_alive:app", name="keep-alive") as server:
        assert b"200 OK" in _two_requests_apart(server.port)
