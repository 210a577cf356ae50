"""``trickle`` passes a proxy that batches its sends every 200 ms, and warns that it batches them;
a proxy that holds everything to the end fails as before; the reference gets no warning. These
tests grade the reference, a 200 ms batcher (``observed/batched_sends.py``) and
``broken/buffering.py`` over real sockets; the judgement at each bound is tested in process in
tests/checks/test_judges_trickle.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import REFERENCE, write_variant
from observed_proxies import write_observed

from labkit.checks import CheckResult, run_checks
from labkit.checks.trickle import BATCHED
from labkit.servers import serve_subprocess, start_mock_upstream


def _trickle(proxy_file: Path, tmp_path: Path) -> CheckResult:
    upstream = start_mock_upstream()
    try:
        env = {"UPSTREAM_URL": upstream.url, "USAGE_LOG": str(tmp_path / "usage.jsonl")}
        with serve_subprocess(str(proxy_file), env=env) as proxy:
            [result] = run_checks(proxy.url, upstream_url=upstream.url, only=["trickle"])
    finally:
        upstream.stop()
    return result


@pytest.mark.sockets
def test_the_reference_trickles_without_a_warning(tmp_path: Path) -> None:
    result = _trickle(REFERENCE, tmp_path)
    assert result.passed and result.warning == "", result.evidence


@pytest.mark.sockets
def test_a_proxy_that_sends_every_200_ms_passes_with_a_warning_naming_the_batching(
    tmp_path: Path,
) -> None:
    result = _trickle(write_observed("batched_sends", tmp_path), tmp_path)
    assert result.passed, result
    assert result.warning == BATCHED and "batches" in result.warning, result.evidence


@pytest.mark.sockets
def test_a_proxy_that_holds_everything_to_the_end_still_fails(tmp_path: Path) -> None:
    result = _trickle(write_variant("buffering", tmp_path), tmp_path)
    assert not result.passed and result.verdict.startswith("tokens arrive in a burst"), result
    assert result.warning == ""
