"""``concurrency`` fails a proxy whose streams wait for a worker, and says they waited: the
thread-pool proxy in ``queued/`` answers every probe at once, so nothing about it looks like a
blocked event loop or a paused machine; only the upstream's records show the queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.checks import CheckResult, run_checks
from labkit.servers import serve_subprocess

THREAD_POOL_PROXY = Path(__file__).parent / "queued" / "thread_pool_proxy.py"


def concurrency_of_a_fresh_pair() -> CheckResult:
    """One grading of ``concurrency`` on a proxy and mock started for it: a burst on servers an
    earlier burst used would first wait for its idle connections to expire
    (``concurrency.IDLE_EXPIRY_S``). The mock runs in a process of its own, as the grader's
    does: on a thread of this test, beside the check's 110 streams and three other workers, it
    once answered its own probe so late that the check called the machine paused
    (inconclusive), which a grading never meets."""
    with (
        serve_subprocess("mock_upstream.served:app", name="queued-mock") as upstream,
        serve_subprocess(str(THREAD_POOL_PROXY), env={"UPSTREAM_URL": upstream.url}) as proxy,
    ):
        [result] = run_checks(proxy.url, upstream_url=upstream.url, only=["concurrency"])
    return result


@pytest.mark.slow
@pytest.mark.sockets
@pytest.mark.timeout(150)
def test_streams_queued_behind_busy_workers_fail_three_gradings_in_a_row() -> None:
    results = [concurrency_of_a_fresh_pair() for _ in range(3)]
    for result in results:
        assert result.status == "failed", (result.verdict, result.hint, result.evidence)
        assert result.verdict.startswith("some streams waited"), result
        assert result.evidence["reached_upstream_late"] > 0, result.evidence
