"""The grader's lanes: long_stream's lane starts before the other proxies are up, and stops
when one of them cannot start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.checks import long_stream
from labkit.grading.grader import agrade_file

pytestmark = pytest.mark.sockets

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = (ROOT / "solutions" / "proxy.py").read_text(encoding="utf-8")

# long_stream run to its end cannot take less than its stream: the mock paces it by the clock
# (a first token at 6 s, then 120 tokens at 40 a second: 9 s). A grading that stopped the lane
# takes what starting two proxies takes (2 s here, 6.4 s once beside eight busy processes).
LONG_STREAM_S = (
    long_stream.SCENARIO["ttft_ms"] / 1000
    + long_stream.SCENARIO["tokens"] / long_stream.SCENARIO["tps"]
)

# Each lane's proxy gets its own usage log (usage-N.jsonl): only lane 0's copy starts.
ONLY_THE_FIRST_COPY_STARTS = """
import os as _os
if not _os.environ["USAGE_LOG"].endswith("usage-0.jsonl"):
    raise RuntimeError("this copy of the proxy refuses to start")
"""


@pytest.mark.slow
def test_a_later_proxy_that_cannot_start_stops_the_lane_already_running(tmp_path: Path) -> None:
    head, future, rest = SOLUTION.partition("from __future__ import annotations\n")
    proxy = tmp_path / "proxy.py"
    proxy.write_text(head + future + ONLY_THE_FIRST_COPY_STARTS + rest)
    report = asyncio.run(agrade_file(proxy, only=["long_stream", "keepalive"]))
    assert report.problem is not None, report.to_json()
    assert "refuses to start" in report.problem.message + report.problem.details
    assert not any(r.passed for r in report.results)
    # long_stream's lane had started and was stopped: it did not run its stream to the end
    assert report.elapsed_s < LONG_STREAM_S, report.elapsed_s
