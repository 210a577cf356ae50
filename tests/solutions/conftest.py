"""Fixtures for the gateway-side solutions: the real mock and the gateway, each on a real
socket and the usage log in a temporary file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from labkit import MockUpstream, serve
from labkit.servers import ServerHandle
from mock_upstream import create_app


@pytest.fixture
def mock() -> Iterator[ServerHandle]:
    with serve(create_app(), name="solutions-mock") as server:
        yield server


@pytest.fixture
def books(mock: ServerHandle) -> MockUpstream:
    """The mock's own records: what it generated, for each request."""
    return MockUpstream(mock.url)


@pytest.fixture
def usage_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "usage.jsonl"
    monkeypatch.setenv("USAGE_LOG", str(path))
    return path
