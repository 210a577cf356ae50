"""``backpressure`` judges what the upstream could *send*, not whether it generated on: the mock,
like llama.cpp and vLLM, goes on generating for a reader whose socket is full."""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import REFERENCE

from labkit.checks import backpressure, run_checks
from labkit.checks.backpressure import MIN_FLOWING, Sample, _held_back, _stream_over
from labkit.servers import serve_subprocess, start_mock_upstream


def _record(state: str, generated: int, sent: int) -> dict[str, object]:
    return {"state": state, "tokens_generated": generated, "tokens_sent": sent}


def test_a_stream_generated_whole_is_not_over_while_its_frames_wait_for_the_proxy() -> None:
    assert not _stream_over(_record("running", 90_000, 60_000))
    assert not _stream_over(_record("completed", 400_000, 60_000))  # a full socket, as engines
    assert _stream_over(_record("completed", 400_000, 400_000))  # the proxy took it all
    assert _stream_over(_record("cancelled", 90_000, 60_000))
    assert _stream_over(_record("errored", 90_000, 90_000))


def test_a_standstill_is_judged_on_the_sent_count() -> None:
    flowing = [Sample(i / 10, sent=5_000 * i, read=i, reads=i) for i in range(20)]
    full = [Sample(2 + i / 10, sent=95_000, read=20 + i, reads=20 + i) for i in range(12)]
    assert MIN_FLOWING < 95_000
    assert not _held_back(flowing)
    assert _held_back([*flowing, *full])


@pytest.mark.sockets
def test_a_window_that_closes_before_the_buffers_fill_is_inconclusive_not_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The check cancels its own slow reader when its window closes; that is not the proxy
    ending the stream early. (The verdicts of the references and every broken proxy are in
    test_grading_mutants.py's table.)"""
    monkeypatch.setattr(backpressure, "window_s", lambda budget: 0.6)  # far too short to fill 5 MB
    upstream = start_mock_upstream()
    env = {"UPSTREAM_URL": upstream.url, "USAGE_LOG": str(tmp_path / "usage.jsonl")}
    with serve_subprocess(str(REFERENCE), env=env) as proxy:
        [result] = run_checks(proxy.url, upstream_url=upstream.url, only=["backpressure"])
    upstream.stop()
    assert result.skipped and result.verdict.startswith("inconclusive"), result
