"""``minute_stream`` observes a real 67 s stream over sockets (its judge is tested in process in
test_judges_minute_stream.py): the reference's heartbeats carry it through the client's idle
limit, and a proxy without heartbeats loses the client at that limit. Both run at once, each on
a mock of its own (the check finds its request by a fixed seed). The mocks run in child
processes: on threads of this process, beside ``make test``'s other workers, they once went
unanswered for 15 s."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest
from grading_support import REFERENCE, write_variant

from labkit.checks import run_checks
from labkit.checks.result import CheckResult
from labkit.servers import serve_subprocess


def minute_stream_of(proxy_file: Path) -> CheckResult:
    with (
        serve_subprocess("mock_upstream.served:app", name=f"mock-{proxy_file.stem}") as upstream,
        serve_subprocess(str(proxy_file), env={"UPSTREAM_URL": upstream.url}) as proxy,
    ):
        [result] = run_checks(proxy.url, upstream_url=upstream.url, only=["minute_stream"])
    return result


@pytest.mark.sockets
@pytest.mark.slow
@pytest.mark.timeout(200)
def test_heartbeats_carry_a_minute_long_stream_and_their_absence_loses_it(
    tmp_path: Path,
) -> None:
    files = [REFERENCE, write_variant("no_heartbeat", tmp_path)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        reference, silent = pool.map(minute_stream_of, files)
    assert reference.passed, reference
    assert reference.evidence["tokens_received"] == reference.evidence["upstream_tokens"] == 64
    assert silent.verdict == (
        "nothing reached the client for longer than its idle limit while the upstream was silent"
    ), silent
    assert str(silent.evidence["transport_error"]).startswith("ReadTimeout")
