"""Fixtures for every test: ``solutions`` importable in child processes, a guard that each
test stops the servers it started, and ``--in-process`` (``make check``: only the tests that open
no socket and start no process; see ``tests/in_process.py``), and how ``make test``'s workers
share the tests (``tests/workers.py``).

pytest puts the repository root on its own ``sys.path`` (``pythonpath`` in pyproject.toml);
the proxies the tests start in child processes, and the grader's worker, find it through
``PYTHONPATH``, which the grader's stripped environment keeps.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from labkit.engine import EngineHandle
from labkit.servers._handles import registry
from tests import in_process, workers

ROOT = Path(__file__).resolve().parents[1]

os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)


def pytest_addoption(parser: pytest.Parser) -> None:
    in_process.addoption(parser)


def pytest_configure(config: pytest.Config) -> None:
    in_process.configure(config)
    workers.addmarker(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    in_process.unconfigure(config)


@pytest.hookimpl(wrapper=True)  # around the others: before -m deselects
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Generator[None, None, None]:
    in_process.deselect_marked(config, items)
    workers.mark_heavy(items)
    workers.slow_modules_first(items)
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    return (yield from in_process.fail_attempts(item))


@pytest.fixture
def loopback_reports() -> Iterator[tuple[int, list[dict[str, object]]]]:
    """A port on the machine's 127.0.0.1 and the JSON each connection to it sent: what learner
    code reached outside its grading's network namespace (nothing, unless the namespace is off:
    ``LABKIT_NETWORK=shared``)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    reports: list[dict[str, object]] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
            reports.append(json.loads(data))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], reports
    stop.set()
    thread.join()
    server.close()


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineHandle]:
    """The real engine, started once for a test module (a model load is a second or two) and
    stopped after it, so that no other module's tests see a server they did not start; skips,
    or fails on CI, where it is not built (see tests/engine_support.py)."""
    from tests.engine_support import require_engine

    handle = require_engine()
    yield handle
    handle.stop()


@pytest.fixture(autouse=True)
def nothing_left_running() -> Iterator[None]:
    """Every test stops the servers it started. Servers already running when it began belong
    to fixtures of a wider scope (pytest sets those up first), which stop them themselves."""
    before = registry.live()
    yield
    leaked = [server for server in registry.live() if server not in before]
    for server in leaked:
        server.stop()
    assert not leaked, f"servers left running: {leaked}"
