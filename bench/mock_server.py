"""The mock upstream as the bench serves it:
``python -m bench.serve --factory bench.mock_server:app --fd N``.

The same app as ``mock-upstream`` (``mock_upstream.app.create_app``), with the scenario every
request starts from read from ``$BENCH_MOCK_SCENARIO`` (``ttft_ms=20;tps=20;tokens=40``), so
that the bench can hand the mock a socket it has already bound instead of a port number.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from mock_upstream.app import create_app
from mock_upstream.scenario import Scenario, parse_header

SCENARIO_ENV = "BENCH_MOCK_SCENARIO"


def app() -> FastAPI:
    defaults = parse_header(os.environ.get(SCENARIO_ENV, ""), source=SCENARIO_ENV)
    return create_app(Scenario().merged(defaults))
