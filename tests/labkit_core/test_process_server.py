"""ProcessServer: any command as a server (nginx, the bench's uvicorn and LiteLLM run this way),
on a socket bound here and inherited, waited for, and stopped with its whole process group."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import psutil
import pytest

from labkit import ServerExitedError, StartTimeoutError, running_servers
from labkit.servers import ProcessServer, bind_socket

pytestmark = pytest.mark.sockets

# Serves GET / with 200 on the listening socket whose fd is in $LISTEN_FD, and starts a
# grandchild (a sleep) that must die with it.
SERVE_INHERITED = """
import http.server, os, socket, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Ok, bind_and_activate=False)
server.socket = socket.socket(fileno=int(os.environ["LISTEN_FD"]))
print("serving", flush=True)
server.serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_command_serves_on_an_inherited_socket_and_stops_with_its_children() -> None:
    sock = bind_socket("127.0.0.1", 0, name="inherited")
    port = sock.getsockname()[1]
    server = ProcessServer(
        [sys.executable, "-c", SERVE_INHERITED],
        name="process-test",
        port=port,
        env={"LISTEN_FD": str(sock.fileno())},
        sock=sock,
        ready_path="/",
    )
    with server.start():
        assert sock.fileno() == -1  # handed down and closed here
        assert server in running_servers() and server.pid is not None
        assert httpx.get(server.url + "/", timeout=5).text == "ok"
        family = [server.pid, *(c.pid for c in psutil.Process(server.pid).children())]
        assert len(family) == 2
    assert not server.running and not server.workdir.exists()
    assert server.stdout() == "serving\n"  # kept once its folder is gone
    assert not any(_alive(pid) for pid in family)


def test_a_command_that_exits_first_is_reported_with_its_stderr() -> None:
    server = ProcessServer(
        [sys.executable, "-c", "import sys; sys.exit('no config here')"], name="exits", port=1
    )
    with pytest.raises(ServerExitedError, match="no config here") as info:
        server.start()
    assert "exited with code 1" in str(info.value)
    assert server not in running_servers() and not server.workdir.exists()


def test_a_command_that_never_gets_ready_times_out() -> None:
    sock = bind_socket("127.0.0.1", 0, name="never")
    server = ProcessServer(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        name="never-ready",
        port=sock.getsockname()[1],
        sock=sock,
        ready_path="/",  # the socket accepts connections; nothing answers HTTP
        start_timeout=1.0,
    )
    with pytest.raises(StartTimeoutError):
        server.start()
    assert server.process is not None and server.process.poll() is not None


# Starts the server above as a ProcessServer, prints its pid, then waits to be killed.
STARTS_AND_WAITS = f"""
import socket, sys, time
from labkit.servers import ProcessServer, bind_socket
sock = bind_socket("127.0.0.1", 0, name="left-behind")
server = ProcessServer(
    [sys.executable, "-c", {SERVE_INHERITED!r}], name="left-behind",
    port=sock.getsockname()[1], env={{"LISTEN_FD": str(sock.fileno())}}, sock=sock, ready_path="/",
)
server.start()
print(server.pid, flush=True)
time.sleep(600)
"""


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_servers_of_a_process_killed_with_sigkill_are_killed_after_it() -> None:
    """nbval stops a notebook's kernel with SIGKILL: no exit code runs, yet its servers (in
    sessions of their own) must not run on for ever."""
    with subprocess.Popen(
        [sys.executable, "-c", STARTS_AND_WAITS], stdout=subprocess.PIPE, text=True
    ) as parent:
        try:
            assert parent.stdout is not None
            pid = int(parent.stdout.readline())
            family = [pid, *(c.pid for c in psutil.Process(pid).children())]
            assert len(family) == 2 and all(_alive(p) for p in family)
            time.sleep(1.0)
            assert all(_alive(p) for p in family), "the servers outlive nothing while it runs"
            parent.kill()
            parent.wait()
            assert _gone_within(family, 5.0), "the server and its child outlived the killed parent"
        finally:
            parent.kill()
