"""Graded by URL, a verdict says what was observed and the advice fits a gateway: no Python
library and no notebook of the lab is named, and the two checks every byte-transparent gateway
fails by design say so. Graded as a file, the hints stay the lab's own."""

from __future__ import annotations

import asyncio
import re

import pytest

from labkit.checks import CheckResult
from labkit.checks.catalogue import ALL_IDS
from labkit.checks.concurrency import BLOCKING_ADVICE
from labkit.checks.gateway_advice import BY_DESIGN, GATEWAY_ADVICE, for_gateway
from labkit.errors import NginxNotFoundError
from labkit.grading.grader import agrade_url
from labkit.servers import start_mock_upstream
from labkit.servers.nginx import find_nginx, start_nginx

# what a hint written for the lab's Python proxy names, and a gateway has no use for
PYTHON = re.compile(
    r"httpx|asyncio|aiohttp|starlette|fastapi|uvicorn|StreamingResponse|event loop|await|"
    r"make_client|proxy\.py|notebook|\b\d\d_[a-z_]+",
    re.IGNORECASE,
)


def test_every_check_has_gateway_advice_that_names_no_python() -> None:
    assert set(GATEWAY_ADVICE) == set(ALL_IDS)
    for text in [*GATEWAY_ADVICE.values(), *BY_DESIGN.values()]:
        assert not PYTHON.search(text), text


@pytest.mark.parametrize("check_id", ["minute_stream", "resume_replica"])
def test_a_gateway_profile_check_failed_by_url_gets_gateway_advice(check_id: str) -> None:
    """Bug: a gateway graded with --profile gateway that failed minute_stream crashed grade-url
    with KeyError: 'minute_stream' (the advice covered the lab's checks only). Fix: advice for
    every check of every profile."""
    failed = for_gateway(CheckResult(check_id, False, "v", {}, "15_resumable_streams: x"))
    assert failed.hint == GATEWAY_ADVICE[check_id]


def test_a_failure_graded_by_url_gets_the_gateway_advice_and_a_by_design_note() -> None:
    blocked = CheckResult("concurrency", False, "v", {}, f"02_forwarding_proxy: {BLOCKING_ADVICE}")
    assert PYTHON.search(blocked.hint)
    assert for_gateway(blocked).hint == GATEWAY_ADVICE["concurrency"]
    heartbeats = for_gateway(CheckResult("keepalive", False, "v", {}, "07: send b': ping'"))
    assert heartbeats.hint.startswith(BY_DESIGN["keepalive"])


def test_a_pass_loses_its_notebook_pointer_and_a_skip_keeps_its_reason() -> None:
    passed = CheckResult("trickle", True, "v", {}, "see 02_forwarding_proxy")
    assert for_gateway(passed).hint == ""
    skipped = CheckResult("usage", False, "skipped: no usage log", {}, "grade the file", True)
    assert for_gateway(skipped) == skipped


@pytest.mark.sockets
@pytest.mark.timeout(120)
def test_nginx_graded_by_url_gets_observations_and_gateway_advice_only() -> None:
    try:
        find_nginx()
    except NginxNotFoundError as exc:
        pytest.skip(f"nginx is not available: {exc}")
    upstream = start_mock_upstream()
    edge = start_nginx(
        f"location / {{ proxy_pass {upstream.url}; proxy_buffering off; proxy_http_version 1.1; }}",
        name="nginx-graded-by-url",
    )
    try:
        report = asyncio.run(
            agrade_url(
                edge.url, upstream.url, only=["trickle", "keepalive", "midstream_error", "usage"]
            )
        )
    finally:
        edge.stop()
        upstream.stop()
    outcome = {r.id: r.outcome for r in report.results}
    assert outcome == {
        "trickle": "passed",
        "keepalive": "failed",
        "midstream_error": "failed",
        "usage": "skipped",
    }, report.results
    for result in report.results:
        assert not PYTHON.search(result.verdict), result
        assert not PYTHON.search(result.hint), result
    by_id = {r.id: r for r in report.results}
    assert "by design" in by_id["keepalive"].hint
    assert "by design" in by_id["midstream_error"].hint
