"""Fixtures for the reliability tests: every test stops what it started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labkit.handles import registry


@pytest.fixture(autouse=True)
def nothing_left_running() -> Iterator[None]:
    yield
    leaked = registry.live()
    registry.stop_all()
    assert not leaked, f"servers left running: {leaked}"
