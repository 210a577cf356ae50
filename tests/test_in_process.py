"""The guard behind ``make check`` (``tests/in_process.py``): it refuses sockets and processes,
says which marker to add, and puts everything back when removed."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.in_process import InProcessGuard, OutOfProcessCall


def test_the_guard_refuses_a_socket_and_a_process_and_names_the_marker() -> None:
    before = (socket.socket.bind, socket.socket.connect, subprocess.Popen.__init__)
    guard = InProcessGuard()
    guard.install()
    try:
        with (
            socket.socket() as sock,
            pytest.raises(OutOfProcessCall, match=r"binds a socket .*`@pytest\.mark\.sockets`"),
        ):
            sock.bind(("127.0.0.1", 0))
        with socket.socket() as sock, pytest.raises(OutOfProcessCall, match="connects a socket"):
            sock.connect(("127.0.0.1", 9))
        with pytest.raises(OutOfProcessCall, match="starts a process"):
            subprocess.run(["true"], check=False)
    finally:
        guard.uninstall()
    assert guard.take_attempts() == [
        "binds a socket (socket.bind)",
        "connects a socket (socket.connect)",
        "starts a process (Popen.__init__)",
    ]
    assert guard.take_attempts() == []
    assert (socket.socket.bind, socket.socket.connect, subprocess.Popen.__init__) == before
