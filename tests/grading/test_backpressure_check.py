"""``backpressure`` judges what the upstream could *send*, not whether it generated on: the mock,
like llama.cpp and vLLM, goes on generating for a reader whose socket is full."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from grading_support import REFERENCE, VARIANTS, expected_failures, write_variant

import solutions.aiohttp_proxy
from labkit.checks.backpressure import MIN_FLOWING, Sample, _held_back, _stream_over
from labkit.grading.roster import Submission, grade_many
from labkit.grading.rubric import Rubric


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


SUBMISSIONS = ["reference", "aiohttp-reference", *VARIANTS]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_backpressure_verdicts_of_the_references_and_broken_proxies(tmp_path: Path) -> None:
    """Only ``unbounded_queue`` and ``buffering`` fail it; every other broken proxy and both
    references pass (or, on a machine too slow to tell, are inconclusive)."""
    paths = {"reference": REFERENCE, "aiohttp-reference": Path(solutions.aiohttp_proxy.__file__)}
    submissions = [
        Submission(name, paths.get(name) or write_variant(name, tmp_path)) for name in SUBMISSIONS
    ]
    reports = grade_many(submissions, Rubric(), only=["backpressure"])
    wrong, table = [], []
    for report in reports:
        [result] = report.results
        expected = report.name not in paths and "backpressure" in expected_failures(report.name)
        failed = result.status == "failed"
        table.append(f"{report.name:<24} {result.status:<12} {dict(result.evidence)}")
        if failed != expected or report.problem is not None:
            wrong.append(f"{report.name}: {result} {dict(result.evidence)}")
    print("\n".join(["", *table]), file=sys.stderr)
    assert not wrong, "\n".join(wrong)
