"""Fixtures for the tests on the real engine.

The engine itself is ``tests/conftest.py``'s session-wide ``engine`` fixture (started once through
``tests/engine_support.require_engine()``: a skip where it is not built, a failure on CI); this
module adds the mock to compare it with.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labkit import ServerHandle, start_mock_upstream


@pytest.fixture(scope="module")
def mock() -> Iterator[ServerHandle]:
    """The mock upstream on a thread; each request sets its own pace (``X-Mock-Scenario``)."""
    handle = start_mock_upstream()
    yield handle
    handle.stop()
