"""The guard behind ``make check``: under ``pytest --in-process`` a test may not open a socket or
start a process.

``make check`` runs every test that works inside the pytest process (judges, decoders, regions,
the bundle maker, the rubric, reports), so that it answers in minutes; ``make test`` runs
everything. Tests that serve or reach something over a socket (a mock, a proxy, an engine, a
browser) or start a process (the grader's worker, a kernel, a CLI) carry the ``sockets`` marker,
and ``--in-process`` deselects them. An unmarked test is in ``make check`` by default, and this
guard makes it fail loudly the moment it binds or connects a socket or starts a process, so a
mislabelled test can neither slow ``make check`` down nor hide from it.

What counts: ``socket.socket.bind``, ``connect`` and ``connect_ex`` (any family; an event loop's
own ``socketpair`` is allowed), ``subprocess.Popen`` (which ``subprocess.run`` and asyncio's
subprocesses use), ``os.fork``, ``os.posix_spawn``/``posix_spawnp``, ``os.system`` and
multiprocessing's spawn. The call raises :class:`OutOfProcessCall` where it was made, and the
test's report is failed with the same message even if the code under test caught the exception
(or made the call on a thread of its own).
"""

from __future__ import annotations

import multiprocessing.util
import os
import socket
import subprocess
from collections.abc import Callable, Generator
from typing import Any

import pytest

MARKER = "sockets"
MARKER_HELP = (
    f"{MARKER}: opens a socket or starts a process (servers, SDK clients, the grader's worker, "
    "kernels, CLIs); `make test` runs it, `make check` (pytest --in-process) deselects it"
)
OPTION = "--in-process"


class OutOfProcessCall(RuntimeError):
    """A test under ``--in-process`` opened a socket or started a process."""


class InProcessGuard:
    """Replaces the calls that open sockets or start processes with ones that refuse and record
    what was attempted; :meth:`uninstall` puts the originals back."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self._originals: list[tuple[object, str, object]] = []

    def install(self) -> None:
        for owner, name, what in (
            (socket.socket, "bind", "binds a socket"),
            (socket.socket, "connect", "connects a socket"),
            (socket.socket, "connect_ex", "connects a socket"),
            (subprocess.Popen, "__init__", "starts a process"),
            (os, "fork", "forks a process"),
            (os, "posix_spawn", "starts a process"),
            (os, "posix_spawnp", "starts a process"),
            (os, "system", "starts a process"),
            (multiprocessing.util, "spawnv_passfds", "starts a process"),
        ):
            original = getattr(owner, name)
            self._originals.append((owner, name, original))
            setattr(owner, name, self._refuse(f"{what} ({_qualname(owner)}.{name})"))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def take_attempts(self) -> list[str]:
        attempts, self.attempts = self.attempts, []
        return attempts

    def _refuse(self, what: str) -> Callable[..., Any]:
        def refuse(*args: object, **kwargs: object) -> Any:
            self.attempts.append(what)
            if args and isinstance(args[0], socket.socket):
                args[0].close()  # the caller loses it to the exception: no ResourceWarning
            raise OutOfProcessCall(_message([what]))

        return refuse


def _qualname(owner: object) -> str:
    return getattr(owner, "__qualname__", None) or getattr(owner, "__name__", repr(owner))


def _message(attempts: list[str]) -> str:
    what = "; ".join(dict.fromkeys(attempts))
    return (
        f"this test {what} under {OPTION}: it belongs outside `make check`. Mark it "
        f"`@pytest.mark.{MARKER}` (or `pytestmark = pytest.mark.{MARKER}` for its module); "
        "`make test` still runs it. If it should stay in `make check`, give it an in-process "
        "stand-in (httpx.ASGITransport, a fake) instead of the socket or the process."
    )


_GUARD = pytest.StashKey[InProcessGuard]()


def addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        help=(
            f"run only the tests not marked `{MARKER}` (make check), and fail any test that "
            "opens a socket or starts a process"
        ),
    )


def configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    if config.getoption(OPTION):
        # matplotlib runs fc-list once to build its font list where it has no cache yet (a fresh
        # machine, a read-only home): a library's set-up, not the test's doing, so done first.
        import matplotlib.font_manager  # noqa: F401

        guard = InProcessGuard()
        guard.install()
        config.stash[_GUARD] = guard


def unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(_GUARD, None)
    if guard is not None:
        guard.uninstall()


def deselect_marked(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption(OPTION):
        return
    kept = [item for item in items if item.get_closest_marker(MARKER) is None]
    deselected = [item for item in items if item.get_closest_marker(MARKER) is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def fail_attempts(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A ``pytest_runtest_makereport`` wrapper body: a phase in which the test tried to open a
    socket or start a process fails, whatever the test made of the refusal."""
    report = yield
    guard = item.config.stash.get(_GUARD, None)
    if guard is None:
        return report
    attempts = guard.take_attempts()
    if attempts:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: {_message(attempts)}"
    return report
