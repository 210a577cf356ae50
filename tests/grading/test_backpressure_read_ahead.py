"""A proxy that reads the upstream ahead of a slow client fails ``backpressure`` with a verdict
that says what was seen: it read ahead without bound, and, when its memory was measured (graded
as a file), whether it kept what it read in memory or outside it (a temporary file); graded by
URL, that where it kept it was not measured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grading_support import write_variant
from observed_proxies import write_observed

from labkit.checks import CheckResult, run_checks
from labkit.checks.backpressure import MEMORY_GROWTH_MB, _ours, read_ahead_verdict
from labkit.servers import serve_subprocess, start_mock_upstream


@pytest.mark.parametrize(
    ("growth_mb", "kept"),
    [
        (None, "not measured"),
        (0.0, "outside memory"),
        (MEMORY_GROWTH_MB - 0.1, "outside memory"),
        (MEMORY_GROWTH_MB, "its memory grows"),
        (MEMORY_GROWTH_MB + 30, "its memory grows"),
    ],
)
def test_the_verdict_says_where_what_was_read_ahead_went(
    growth_mb: float | None, kept: str
) -> None:
    verdict = read_ahead_verdict(growth_mb)
    assert verdict.startswith("the proxy reads the upstream ahead of a slow client without bound")
    assert kept in verdict
    assert not re.search(r"\d", verdict)
    if kept != "its memory grows":
        assert "memory grows" not in verdict


def _backpressure(proxy_file: Path, tmp_path: Path, *, measured: bool) -> CheckResult:
    upstream = start_mock_upstream()
    try:
        env = {"UPSTREAM_URL": upstream.url, "USAGE_LOG": str(tmp_path / "usage.jsonl")}
        with serve_subprocess(str(proxy_file), env=env) as proxy:
            assert proxy.process is not None
            pid = proxy.process.pid if measured else None
            [result] = run_checks(
                proxy.url, upstream_url=upstream.url, only=["backpressure"], proxy_pid=pid
            )
    finally:
        upstream.stop()
    if result.inconclusive:
        pytest.skip(f"the machine was too slow to decide backpressure: {dict(result.evidence)}")
    return result


@pytest.mark.slow
@pytest.mark.sockets
def test_a_proxy_that_spools_to_a_file_fails_without_a_claim_about_its_memory(
    tmp_path: Path,
) -> None:
    result = _backpressure(write_observed("spool_to_file", tmp_path), tmp_path, measured=True)
    assert result.status == "failed", result
    assert result.verdict == read_ahead_verdict(0.0), result.evidence
    assert "memory grows" not in result.verdict
    growth = result.evidence["rss_growth_mb"]
    assert isinstance(growth, float) and growth < MEMORY_GROWTH_MB


@pytest.mark.slow
@pytest.mark.sockets
def test_an_unbounded_queue_fails_saying_its_memory_grew(tmp_path: Path) -> None:
    result = _backpressure(write_variant("unbounded_queue", tmp_path), tmp_path, measured=True)
    assert result.status == "failed", result
    assert result.verdict == read_ahead_verdict(MEMORY_GROWTH_MB), result.evidence


@pytest.mark.slow
@pytest.mark.sockets
def test_graded_by_url_the_verdict_says_the_memory_was_not_measured(tmp_path: Path) -> None:
    result = _backpressure(write_variant("unbounded_queue", tmp_path), tmp_path, measured=False)
    assert result.status == "failed", result
    assert result.verdict == read_ahead_verdict(None)
    assert result.evidence["rss_growth_mb"] is None


def test_a_run_again_reads_only_the_record_of_its_own_request() -> None:
    """Bug: run again after an inconclusive run, the check read the earlier run's record (same
    seed, its stream still being cancelled) until its own arrived; the sent count seemed to fall
    and stand still, and an unbounded queue passed. Fix: a record that started before this
    run's request was sent is not this run's."""
    earlier = {"state": "running", "tokens_sent": 120_000, "started_at": 100.0}
    ours = {"state": "running", "tokens_sent": 300, "started_at": 130.0}
    assert _ours(earlier, sent_at=129.9) is None
    assert _ours(ours, sent_at=129.9) is ours
    assert _ours(ours, sent_at=130.9) is ours  # the mock's clock a little behind ours
    assert _ours(None, sent_at=129.9) is None
