"""One pre-imported parent for a class's notebook runners: the imports paid once, not per learner.

A learner's notebook runner (``labkit.grading.notebook_runner``) spends seconds of CPU importing
what the instructor's cells import (Anthropic's and OpenAI's SDKs, IPython, the checks) before
its first notebook starts, about as much as all its notebooks' own work. When a class is graded
(``labkit grade-class``), ``Zygote.start`` starts one process (``python -m
labkit.grading.zygote``) that makes those imports once and then waits on a Unix socket only root
can open. A grading worker asks it for a runner (``spawn``): the zygote forks, and the child
confines itself before it runs anything of the learner's (``labkit.grading.confine``: its own
cgroup, namespaces, root folder and unprivileged user, as ``bwrap`` would give a command), then
runs the learner's plan as the runner would. The worker watches it as it would a process it
started: ``poll``, ``kill`` and the exit status come over the same connection. A connection that
closes early (the worker died) kills its runner; a zygote whose parent goes away (its stdin
closes) kills every runner it started and ends.

The zygote holds nothing of the instructor's or of any learner: it imports installed packages
only, its environment is stripped like a worker's, and a learner's plan and folder reach only
the child forked for them. Where a forked child cannot confine itself (not root, not Linux, a
kernel or container that refuses the namespaces), ``start`` says why and the workers start their
runners through ``bwrap`` as before.

Protocol, one JSON line each way: the worker sends ``{"argv": [PLAN, EVENTS], "sandbox":
{...}}`` (a :class:`labkit.grading.confine.Sandbox` without its ``new_root``), the zygote answers
``{"pid": N}`` (or ``{"error": "..."}``), later ``{"status": CODE}`` when the runner has ended; a
line ``kill`` from the worker kills it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labkit.grading.confine import Sandbox, confinement_works, run_confined

__all__ = ["Spawned", "Zygote", "ZygoteClient", "main"]

_REAP_S = 0.05
_EX_SOFTWARE = 70


class Spawned:
    """A runner the zygote forked, watched over its connection like a ``subprocess.Popen``."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._buffer = b""

    def _read(self, block: bool) -> None:
        if self.returncode is not None:
            return
        self._conn.setblocking(block)
        while b"\n" not in self._buffer:
            try:
                data = self._conn.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # the zygote is gone: its runners went with it
                self._finish(-signal.SIGKILL)
                return
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        self._finish(int(json.loads(line)["status"]))

    def _finish(self, code: int) -> None:
        self.returncode = code
        self._conn.close()

    def poll(self) -> int | None:
        self._read(block=False)
        return self.returncode

    def wait(self) -> int:
        self._read(block=True)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """Ask the zygote to kill the runner (and with it its whole PID namespace)."""
        if self.returncode is None:
            with contextlib.suppress(OSError):
                self._conn.sendall(b"kill\n")


class ZygoteClient:
    """A grading worker's way to the zygote listening at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def spawn(self, argv: Sequence[str], sandbox: Sandbox) -> Spawned:
        """The runner for ``argv`` (the plan and events paths), confined in ``sandbox``.
        Raises ``OSError`` if the zygote cannot be reached or refuses."""
        fields = dataclasses.asdict(sandbox)
        fields.pop("new_root")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            conn.sendall(json.dumps({"argv": list(argv), "sandbox": fields}).encode() + b"\n")
            answer = conn.makefile("rb").readline()
            reply = json.loads(answer) if answer else {"error": "the zygote closed the line"}
        except (OSError, ValueError) as exc:
            conn.close()
            raise OSError(f"the notebook runners' zygote at {self.path}: {exc}") from exc
        if "pid" not in reply:
            conn.close()
            raise OSError(f"the notebook runners' zygote refused: {reply.get('error')}")
        return Spawned(conn, int(reply["pid"]))


class Zygote:
    """The zygote process, from the side that grades the class: ``start`` it, hand its
    ``path`` to the workers, ``stop`` it."""

    def __init__(self, process: subprocess.Popen[bytes], home: Path) -> None:
        self.process = process
        self.home = home
        self.path = str(home / "zygote.sock")

    @classmethod
    def start(cls, modules: Sequence[str], env: dict[str, str], timeout_s: float) -> Zygote | str:
        """A zygote that has imported ``modules``, or why none could start (the workers then
        start their runners through ``bwrap``)."""
        home = Path(tempfile.mkdtemp(prefix="labkit-zygote-"))
        os.chmod(home, 0o700)  # the socket's folder: root's alone
        process = subprocess.Popen(
            [sys.executable, "-m", "labkit.grading.zygote", str(home / "zygote.sock"), *modules],
            cwd=home,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        zygote = cls(process, home)
        first: list[bytes] = []
        reader = threading.Thread(
            target=lambda: first.append(process.stdout.readline() if process.stdout else b""),
            daemon=True,
        )
        reader.start()
        reader.join(timeout_s)
        answer = json.loads(first[0]) if first and first[0] else {}
        if answer.get("ready"):
            return zygote
        zygote.stop()
        return str(answer.get("unavailable") or f"it did not start within {timeout_s:g} s")

    def stop(self) -> None:
        """End the zygote: closing its stdin makes it kill every runner it started and leave."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)


class _Server:
    """The zygote's side: accept requests, fork confined runners, report how they ended."""

    def __init__(self, path: str, new_root: str) -> None:
        self.new_root = new_root
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(0, selectors.EVENT_READ)
        self.buffers: dict[socket.socket, bytes] = {}
        self.runners: dict[int, socket.socket] = {}  # pid -> its worker's connection

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select(timeout=_REAP_S):
                if key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    self.buffers[conn] = b""
                    self.selector.register(conn, selectors.EVENT_READ)
                elif key.fileobj == 0:
                    if not os.read(0, 4096):
                        self.shut_down()
                        return
                else:
                    assert isinstance(key.fileobj, socket.socket)
                    self.heard(key.fileobj)
            self.reap()

    def heard(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        pid = next((p for p, c in self.runners.items() if c is conn), None)
        if pid is not None:  # a runner's worker: "kill", or gone (which kills it too)
            if not data or b"kill" in data:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not data:
                self.selector.unregister(conn)
            return
        if not data:
            self.drop(conn)
            return
        self.buffers[conn] += data
        if b"\n" in self.buffers[conn]:
            line = self.buffers.pop(conn).partition(b"\n")[0]
            self.fork(conn, line)

    def fork(self, conn: socket.socket, line: bytes) -> None:
        try:
            request = json.loads(line)
            sandbox = Sandbox(**{**request["sandbox"], "new_root": self.new_root})
            plan, events = (Path(p) for p in request["argv"])
            sandbox = dataclasses.replace(
                sandbox,
                readonly=tuple(sandbox.readonly),
                writable=tuple(sandbox.writable),
                cgroup_procs=tuple(sandbox.cgroup_procs),
            )
        except (ValueError, KeyError, TypeError) as exc:
            self.answer(conn, {"error": f"not a request: {exc}"})
            self.drop(conn)
            return
        pid = os.fork()
        if pid == 0:
            self.become_runner(sandbox, plan, events)
        self.runners[pid] = conn
        self.answer(conn, {"pid": pid})

    def become_runner(self, sandbox: Sandbox, plan: Path, events: Path) -> None:
        """In the forked child: nothing of the zygote's open, then confined, then the plan."""
        code = _EX_SOFTWARE
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # closed through their objects, so that none closes a reused number later
            for conn in [self.listener, *self.buffers, *self.runners.values()]:
                conn.close()
            self.selector.close()
            log = os.open(f"{events}-start.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            from labkit.grading.notebook_runner import run_plan

            def runner() -> int:
                sys.argv = ["labkit.grading.notebook_runner", str(plan), str(events)]
                sys.path[0] = sandbox.cwd
                return run_plan(plan, events)

            code = run_confined(sandbox, runner)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                print(f"the zygote's child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os._exit(code)

    def reap(self) -> None:
        while self.runners:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.runners.pop(pid, None)
            if conn is not None:
                self.answer(conn, {"status": os.waitstatus_to_exitcode(status)})
                self.drop(conn)

    def answer(self, conn: socket.socket, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            conn.setblocking(True)
            conn.sendall(json.dumps(message).encode() + b"\n")

    def drop(self, conn: socket.socket) -> None:
        self.buffers.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        conn.close()

    def shut_down(self) -> None:
        for pid in list(self.runners):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while self.runners and time.monotonic() < deadline:
            self.reap()
            time.sleep(_REAP_S)


def main(argv: list[str] | None = None) -> int:
    """``python -m labkit.grading.zygote SOCKET MODULE...``: one JSON line on stdout (``ready``
    or ``unavailable`` and why), then serve until stdin closes."""
    args = argv if argv is not None else sys.argv[1:]
    path, modules = args[0], args[1:]
    new_root = os.path.join(os.path.dirname(path), "root")
    try:
        os.makedirs(new_root, exist_ok=True)
        why_not = confinement_works(new_root)
    except OSError as exc:
        why_not = f"its folder could not be made: {exc}"
    if why_not:
        print(json.dumps({"unavailable": why_not}), flush=True)
        return 0
    from labkit.grading.notebook_runner import prepare

    prepare(modules)
    if threading.active_count() != 1:  # a fork copies one thread: the others' locks stay held
        print(json.dumps({"unavailable": "an import started a thread"}), flush=True)
        return 0
    server = _Server(path, new_root)
    print(json.dumps({"ready": True}), flush=True)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
