"""Fixtures for labkit's core tests, and a stricter guard than ``tests/conftest.py``'s: every
test leaves no server, no server thread and no listening socket behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psutil
import pytest
from labkit_core_support import make_stream_app

from labkit import ThreadServer, serve
from labkit.servers._handles import registry


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def stream_server() -> Iterator[ThreadServer]:
    with serve(make_stream_app(), name="stream-app") as server:
        yield server


def _listening_ports() -> set[int]:
    return {
        conn.laddr.port
        for conn in psutil.Process().net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }


@pytest.fixture(autouse=True)
def nothing_left_running() -> Iterator[None]:
    """Every test must stop what it started: no servers, server threads or listening sockets."""
    ports_before = _listening_ports()
    yield
    leaked = registry.live()
    registry.stop_all()
    threads = [t.name for t in threading.enumerate() if t.name.startswith("labkit:")]
    ports = _listening_ports() - ports_before
    assert not leaked, f"servers left running: {leaked}"
    assert not threads, f"threads left running: {threads}"
    assert not ports, f"sockets left listening: {ports}"
