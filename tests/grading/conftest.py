"""Fixtures for the checks, the reference proxy and the grader: a mock upstream and the reference
served on real sockets (``tests/conftest.py`` checks that every test stops what it started), and
a Python another user can start (``another_user``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from another_user import AnotherUser, find_another_user

from labkit import serve
from labkit.servers import ServerHandle
from mock_upstream import create_app
from solutions import proxy as reference


@pytest.fixture
def mock() -> Iterator[ServerHandle]:
    with serve(create_app(), name="grading-mock") as server:
        yield server


@pytest.fixture
def usage_log(tmp_path: Path) -> Path:
    return tmp_path / "usage.jsonl"


@pytest.fixture
def reference_proxy(
    mock: ServerHandle, usage_log: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerHandle]:
    """The reference proxy on a thread, forwarding to ``mock`` and logging to ``usage_log``."""
    monkeypatch.setenv("UPSTREAM_URL", mock.url)
    monkeypatch.setenv("USAGE_LOG", str(usage_log))
    with serve(reference.app, name="reference-proxy") as server:
        yield server


@pytest.fixture(scope="session")
def another_user() -> Iterator[AnotherUser]:
    """A Python the unprivileged ``NOBODY`` can start, with labkit (``another_user.py``);
    skips, saying why, where there is none (not root, no setpriv, no Python that user can
    start)."""
    scratch = Path(tempfile.mkdtemp(prefix="labkit-another-user-"))  # not pytest's: root's alone
    try:
        found = find_another_user(scratch)
        if isinstance(found, str):
            pytest.skip(found)
        yield found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
