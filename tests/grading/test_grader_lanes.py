"""The grader's lanes: long_stream's lane starts before the other proxies are up, and stops
when one of them cannot start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.grading.grader import agrade_file

pytestmark = pytest.mark.sockets

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = (ROOT / "solutions" / "proxy.py").read_text(encoding="utf-8")

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
    # long_stream's lane had started (its first token is 6 s away) and was stopped
    assert report.elapsed_s < 6, report.elapsed_s
