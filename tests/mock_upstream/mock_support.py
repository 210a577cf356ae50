"""Test support for the mock upstream: a real uvicorn server in a background thread."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from mock_upstream import Scenario, create_app

# Fast by default: tests that need timing margins set their own scenario.
FAST = Scenario(ttft_ms=20, tps=500.0, tokens=24)
#: The states of a request that has not ended.
ACTIVE = ("queued", "running")


@dataclass
class LiveServer:
    """A running app: ``url`` has no ``/v1``; ``client`` is a plain httpx client on it."""

    app: FastAPI
    url: str
    client: httpx.Client

    def records(self) -> list[dict[str, Any]]:
        response = self.client.get("/debug/requests")
        response.raise_for_status()
        records: list[dict[str, Any]] = response.json()
        return records

    def last(self) -> dict[str, Any]:
        return self.records()[-1]

    def wait_until_idle(self, timeout: float = 3.0) -> list[dict[str, Any]]:
        """Records once none is running or queued (fails the test after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.records()
            if all(r["state"] not in ACTIVE for r in records):
                return records
            if time.monotonic() > deadline:
                pytest.fail(f"requests still running or queued after {timeout} s: {records}")
            time.sleep(0.01)

    def record(self, seed: int) -> dict[str, Any] | None:
        """The latest record of the request whose scenario has this ``seed``."""
        found = [r for r in self.records() if r["scenario"].get("seed") == seed]
        return found[-1] if found else None

    def wait_for(
        self, seed: int, done: Callable[[dict[str, Any]], bool], timeout: float = 5.0
    ) -> dict[str, Any]:
        """The record of ``seed`` once ``done(record)`` holds (fails the test after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.record(seed)
            if record is not None and done(record):
                return record
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the request with seed {seed} did not get there in {timeout} s: {record}"
                )
            time.sleep(0.01)

    def metric(self, name: str) -> float:
        """The value of one unlabelled sample in /metrics (0.0 when absent)."""
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # pragma: no cover - not in the main thread
        pass


def serve(app: FastAPI, *, send_buffer: int | None = None) -> Iterator[str]:
    """Serve ``app`` on a free port. ``send_buffer`` sets SO_SNDBUF on the listening socket,
    which the connections it accepts inherit (Linux): a small one keeps what a stalled reader
    leaves in flight small and the same on every machine, instead of the megabytes the kernel's
    autotuning allows."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
    )
    server = _Server(config)
    sockets = None
    if send_buffer is not None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        listener.bind(("127.0.0.1", 0))
        sockets = [listener]
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=sockets)), daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 5.0
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the mock upstream test server did not start within 5 s")
        time.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5.0)


def live_server(defaults: Scenario, *, send_buffer: int | None = None) -> Iterator[LiveServer]:
    app = create_app(defaults)
    for url in serve(app, send_buffer=send_buffer):
        with httpx.Client(base_url=url, timeout=10.0) as client:
            yield LiveServer(app, url, client)


def raw_request(
    url: str,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    *,
    rcvbuf: int | None = None,
) -> socket.socket:
    """Send one POST over a connection of its own and return the socket, nothing read: the
    test decides when to read and when to hang up (``close()``). ``rcvbuf`` sets the socket's
    receive buffer (a reader that reads nothing then holds little in flight)."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    host, port = url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))
    data = json.dumps(body).encode()
    head = [f"POST {path} HTTP/1.1", "Host: mock", "Content-Type: application/json"]
    head += [f"{name}: {value}" for name, value in (headers or {}).items()]
    head.append(f"Content-Length: {len(data)}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    return sock


def read_head(sock: socket.socket, timeout: float) -> bytes:
    """The response's status line and headers, or what came of them within ``timeout`` seconds
    (``b""``: nothing at all)."""
    sock.settimeout(timeout)
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            data = sock.recv(65536)
            if not data:
                break
            received += data
    except TimeoutError:
        pass
    return received.partition(b"\r\n\r\n")[0]


def scenario_header(**keys: object) -> dict[str, str]:
    """``extra_headers`` for the SDKs: ``X-Mock-Scenario: k=v;k=v``."""
    return {"X-Mock-Scenario": ";".join(f"{k}={v}" for k, v in keys.items())}


USER = [{"role": "user", "content": "Tell me about streaming."}]
