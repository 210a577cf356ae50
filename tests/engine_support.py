"""The real engine for tests: started once, or a clear skip (or, on CI, a failure).

``make test`` builds the engine before the tests (``make engine``), so on CI a missing engine is
a broken set-up and fails; on a developer's machine without it, the engine tests skip, saying
how to get it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from labkit.engine import EngineHandle, find_engine, start_engine
from labkit.engine.serve import ENGINE_URL_ENV


def require_engine_or_skip() -> None:
    """Return if there is an engine to test against (built here, or ``LABKIT_ENGINE_URL``);
    else skip the calling test with one line saying how to get it, or fail it under CI."""
    if find_engine() is None and not os.environ.get(ENGINE_URL_ENV):
        reason = "no real engine here: run `make engine` (minutes, once) to run these tests"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; under CI `make test` builds it first", pytrace=False)
        pytest.skip(reason)


def require_engine() -> EngineHandle:
    """``start_engine()``'s handle; skips (or fails on CI) when there is no engine here."""
    require_engine_or_skip()
    return start_engine()


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every 20 ms; True once it holds, False if ``timeout`` s pass first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
