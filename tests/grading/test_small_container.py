"""Fair verdicts in a small container: graded with Gradescope's default limits (0.5 vCPU,
768 MB, as a cgroup), the reference gets full marks and three broken proxies that between them
fail every timed check fail exactly the checks they fail on a big machine, none of them
inconclusive.

Needs a cgroup it can create (root, cgroup v1 or v2, see ``bench/small_container.py``); skips
with the reason otherwise. ``python -m bench.small_container`` is the full version: both
references and every broken proxy, three runs, one grading at a time.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from bench.small_container import CgroupUnavailable, grade_all, render, small_cgroup, submissions
from labkit.checks import CheckResult, runner
from labkit.checks.backpressure import Sample, _held_back
from labkit.checks.catalogue import CHECKS, Check
from labkit.checks.context import CheckContext, Outcome
from labkit.checks.keepalive import _silence
from labkit.checks.machine import Budget, cpu_limit
from labkit.checks.result import INCONCLUSIVE
from labkit.errors import MockUpstreamError
from labkit.grading.gradescope import results_for
from labkit.grading.report import (
    SubmissionReport,
    csv_row,
    feedback_markdown,
    render_table,
)
from labkit.grading.rubric import Rubric, RubricError

CPU = 0.5
MEMORY_MB = 768
ONE_CPU = Budget(cpus=1.0)
# The reference, and broken proxies whose failing checks measure time or flow: each timed check
# (backpressure, concurrency, both keepalives, trickle, the cancels of every window, and notebook
# 15's resumes, Stop and grace period) is failed by one of them.
CHOSEN = ["reference", "blocking_client", "buffering", "no_cancel"]
TIMED = {
    "backpressure",
    "concurrency",
    "keepalive",
    "keepalive_under_comments",
    "trickle",
    "cancel",
    "cancel_before_first_token",
    "cancel_queued",
    "cancel_whole_answer",
    "resume",
    "resume_twice",
    "resume_stop",
    "resume_grace",
    "replay_bound",
}
JOBS = 4  # four cgroups of half a CPU each fill the machine's two, as containers fill a host


@pytest.fixture(scope="module")
def cgroups_available() -> None:
    try:
        with small_cgroup(CPU, MEMORY_MB):
            pass
    except CgroupUnavailable as exc:
        pytest.skip(f"cannot make a {CPU:g}-CPU cgroup here: {exc}")


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: on a slower day of this machine it ran past 300 s
@pytest.mark.usefixtures("cgroups_available")
@pytest.mark.heavy
@pytest.mark.sockets
def test_half_a_cpu_gives_the_same_verdicts(tmp_path: Path) -> None:
    chosen = submissions(tmp_path, CHOSEN)
    gradings = grade_all(chosen, cpu=CPU, memory_mb=MEMORY_MB, jobs=JOBS)
    # Each submission is graded once, as in the verdict table: a verdict that comes out wrong
    # once is a learner graded by chance.
    table = render(gradings)
    print(table)
    assert sorted(g.submission for g in gradings) == sorted(CHOSEN)
    # every timed check is failed by one of them (blocking_client also fails integrity, untimed)
    assert set().union(*(g.expected for g in gradings)) - {"integrity"} == TIMED, table
    for grading in gradings:
        assert grading.problem is None, table
        assert grading.failed == grading.expected, table
        assert not grading.inconclusive, table
        assert grading.oom_kills == 0, table
        if not grading.expected:
            assert grading.score == grading.max_score == 100, table


# The pieces that make a small container fair, without a cgroup: quick.


def _cgroup_file(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_cpu_limit_is_the_smallest_quota_above_this_process(tmp_path: Path) -> None:
    _cgroup_file(tmp_path, "cpu/cpu.cfs_quota_us", "-1\n")
    _cgroup_file(tmp_path, "cpu/cpu.cfs_period_us", "100000\n")
    _cgroup_file(tmp_path, "cpu/grading/cpu.cfs_quota_us", "150000\n")
    _cgroup_file(tmp_path, "cpu/grading/cpu.cfs_period_us", "100000\n")
    _cgroup_file(tmp_path, "cpu/grading/one/cpu.cfs_quota_us", "50000\n")
    _cgroup_file(tmp_path, "cpu/grading/one/cpu.cfs_period_us", "100000\n")
    v1 = "4:memory:/grading/one\n1:cpu,cpuacct:/grading/one\n0::/\n"
    assert cpu_limit(v1, tmp_path) == 0.5
    assert cpu_limit("1:cpu,cpuacct:/grading\n", tmp_path) == min(1.5, _cores())
    _cgroup_file(tmp_path, "v2/cpu.max", "max 100000\n")
    _cgroup_file(tmp_path, "v2/box/cpu.max", "50000 100000\n")
    assert cpu_limit("0::/v2/box\n", tmp_path) == 0.5
    assert cpu_limit("0::/nowhere\n", tmp_path) == _cores()  # unreadable: no limit known


def test_proxies_that_start_together_share_the_cpus_and_the_time_to_start() -> None:
    # one alone: the usual limit from one CPU up, twice it at half a CPU
    assert Budget(cpus=2).start_scale(1) == 1 and Budget(cpus=0.5).start_scale(1) == 2
    # four at once: half a CPU each on two CPUs, an eighth each on half a CPU
    assert Budget(cpus=2).start_scale(4) == 2 and Budget(cpus=0.5).start_scale(4) == 8


def _cores() -> float:
    return float(len(os.sched_getaffinity(0)))


def test_an_inconclusive_check_never_costs_a_point() -> None:
    outcome = Outcome("backpressure", "10_backpressure_and_slow_clients")
    result = outcome.inconclusive(
        "inconclusive: the machine was too slow to fill the socket buffers in time",
        "after 40.0 s the upstream had made 90000 tokens and was still moving",
        {"lead_tokens": 89990},
    )
    assert result.inconclusive and result.skipped and not result.passed
    assert result.status == "skipped"  # what every report renderer and the worker's JSON know
    assert not re.search(r"\d", result.verdict)
    assert "90000 tokens" in str(result.evidence[INCONCLUSIVE])
    passed = CheckResult("trickle", True, "tokens reach the client", {})
    report = SubmissionReport("learner", "proxy.py", [passed, result], Rubric())
    assert report.score == report.max_score == 100
    assert report.all_passed
    # The grader reads each worker's report back from JSON: still inconclusive, still no FAIL.
    again = SubmissionReport.from_json(report.to_json(), Rubric())
    [back] = [r for r in again.results if r.id == "backpressure"]
    assert back.inconclusive and again.score == 100


def test_inconclusive_is_shown_as_such_and_scored_as_the_rubric_says() -> None:
    undecided = Outcome("backpressure", "10_backpressure_and_slow_clients").inconclusive(
        "inconclusive: the machine was too slow to fill the socket buffers in time",
        "the upstream was still moving",
        {"lead_tokens": 89990},
    )
    passed = CheckResult("trickle", True, "tokens reach the client", {})
    failed = CheckResult("cancel", False, "the upstream went on", {}, "cancel it")
    left_out = SubmissionReport("ana", "ana.py", [passed, failed, undecided], Rubric())
    awarded = SubmissionReport(
        "ana", "ana.py", [passed, failed, undecided], Rubric(inconclusive="award")
    )
    assert (left_out.score, left_out.max_score) == (50, 100)
    assert (awarded.score, awarded.max_score) == (66.67, 100)
    table = render_table(left_out)
    assert "????  backpressure" in table and "1 inconclusive on this machine, not counted" in table
    assert csv_row(left_out)["backpressure"] == "inconclusive"
    assert "Not decided on the grader's machine" in feedback_markdown(awarded)
    [test] = [t for t in results_for(awarded)["tests"] if t["name"].startswith("back")]
    assert test["name"].endswith("(not decided)")
    assert test["score"] == test["max_score"] > 0
    [test] = [t for t in results_for(left_out)["tests"] if t["name"].startswith("back")]
    assert test["max_score"] == 0 and "never counts against you" in test["output"]


def test_the_rubric_says_what_an_inconclusive_check_is_worth() -> None:
    assert Rubric.from_mapping({"inconclusive": "award"}).awards_inconclusive
    with pytest.raises(RubricError, match="expected 'leave_out' or 'award'"):
        Rubric.from_mapping({"inconclusive": "pass"})


def _sample(t: float, generated: int, reads: int) -> Sample:
    return Sample(t, generated, read=reads, reads=reads)


def test_backpressure_needs_a_standstill_while_the_client_reads() -> None:
    flowing = [_sample(i / 10, 5000 * i, i) for i in range(20)]
    assert not _held_back(flowing)
    still = [*flowing, *(_sample(2 + i / 10, 95_000, 20 + i) for i in range(12))]
    assert _held_back(still)
    starved = [*flowing, *(_sample(2 + i / 10, 95_000, 20) for i in range(12))]
    assert not _held_back(starved)  # the client read nothing: waiting or starving, cannot tell


def test_the_keepalive_silence_is_the_longest_gap_the_client_saw() -> None:
    assert _silence([0.2, 0.25, 0.3, 4.8, 4.85]) == (0.3, 4.8)
    assert _silence([1.0]) is None


def test_the_flat_out_lane_waits_for_the_other_lanes() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        lanes = runner.TimedLanes()
        others_may_end = asyncio.Event()

        async def timed() -> None:
            async with lanes.running():
                await others_may_end.wait()
                order.append("others done")

        async def solo() -> None:
            await lanes.wait_idle()
            order.append("solo")

        tasks = [asyncio.create_task(timed()), asyncio.create_task(solo())]
        await asyncio.sleep(0.05)
        others_may_end.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["others done", "solo"]


def decided(result: CheckResult, budget: Budget) -> CheckResult:
    """The judge of a test's check whose experiment decides by itself."""
    return result


def test_a_mock_too_busy_to_show_its_books_is_inconclusive_not_a_fail() -> None:
    """Seen on a loaded machine: the mock streaming flat out for backpressure did not answer
    /debug/requests within the timeout, and the check failed a correct proxy."""

    async def busy_mock(ctx: CheckContext) -> CheckResult:
        raise MockUpstreamError(url="http://mock/debug/requests", expected="a response", got="x")

    check = Check(
        "backpressure", "10_backpressure_and_slow_clients", "summary", 5.0, busy_mock, decided
    )
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=ONE_CPU)
    result = asyncio.run(runner.run_one(check, ctx))
    assert result.inconclusive and not result.passed
    assert result.verdict == "inconclusive: the grader's mock upstream did not answer in time"
    assert result.evidence["attempts"] == runner.ATTEMPTS


def test_an_inconclusive_check_is_run_again_and_the_second_verdict_counts() -> None:
    """Seen in CI at half a CPU: two gradings' concurrency probes both waited 1.7 s at the
    same moment (median 3 ms), a pause of the machine. Run again, the check decides."""
    calls: list[int] = []

    async def paused_once(ctx: CheckContext) -> CheckResult:
        calls.append(1)
        outcome = Outcome("concurrency", "07_production_gateway")
        if len(calls) == 1:
            return outcome.inconclusive(
                "inconclusive: the machine paused while the proxy was being timed",
                "the slowest of 40 probes took 1701 ms but the median 3 ms",
                {"probes": 40},
            )
        return outcome.failed("a slow stream holds up the others", {"probes": 40}, "async")

    check = Check("concurrency", "07_production_gateway", "summary", 5.0, paused_once, decided)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=ONE_CPU)
    result = asyncio.run(runner.run_one(check, ctx))
    assert len(calls) == 2
    assert result.status == "failed" and not result.inconclusive
    assert result.evidence["attempts"] == 2
    assert "1701 ms" in str(result.evidence["first_attempt"])


def test_an_inconclusive_check_that_asks_for_no_retry_is_run_once() -> None:
    calls: list[int] = []

    async def window_ran_out(ctx: CheckContext) -> CheckResult:
        calls.append(1)
        return Outcome("backpressure", "10_backpressure_and_slow_clients").inconclusive(
            "inconclusive: the machine was too slow to fill the socket buffers in time",
            "after 55.0 s the upstream had sent 90089 tokens and was still sending",
            {},
        )

    check = Check(
        "backpressure",
        "10_backpressure_and_slow_clients",
        "summary",
        5.0,
        window_ran_out,
        decided,
        retry_inconclusive=False,
    )
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=ONE_CPU)
    result = asyncio.run(runner.run_one(check, ctx))
    assert len(calls) == 1
    assert result.inconclusive and "attempts" not in result.evidence


def test_the_catalogue_runs_backpressure_once_and_every_other_check_again() -> None:
    assert [c.id for c in CHECKS if not c.retry_inconclusive] == ["backpressure"]


def test_a_check_that_decides_at_once_is_run_once() -> None:
    calls: list[int] = []

    async def decides(ctx: CheckContext) -> CheckResult:
        calls.append(1)
        return CheckResult("trickle", True, "tokens reach the client as they are made")

    check = Check("trickle", "03_breaking_with_buffers", "summary", 5.0, decides, decided)
    ctx = CheckContext("http://127.0.0.1:9", "http://x", budget=ONE_CPU)
    result = asyncio.run(runner.run_one(check, ctx))
    assert calls == [1] and "attempts" not in result.evidence
