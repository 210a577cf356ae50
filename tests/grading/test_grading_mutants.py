"""The grader's own mutation test: both references pass every check, and each broken proxy
fails exactly the checks its module names (see ``broken/``), graded the way instructors grade a
class (roster mode, parallel workers). A broken proxy whose bug only a ``gateway`` check sees
(``log_in_process``: the lab's single proxy behaves as the reference) is left out of the lab's
table and graded on that check in tests/grading/test_resume_replica.py."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from grading_support import (
    LAB_VARIANTS,
    REFERENCE,
    VARIANTS,
    broken_source,
    expected_failures,
    lab_failures,
    region_functions,
    stubbed_one_region,
    write_variant,
)
from observed_proxies import write_observed

import solutions.aiohttp_proxy
from labkit.checks import CHECK_IDS
from labkit.checks.catalogue import ALL_IDS
from labkit.grading.report import SubmissionReport
from labkit.grading.roster import Submission, default_jobs, grade_many
from labkit.grading.rubric import Rubric

# A grading spends about half its time waiting on paced streams, so one more grading than the
# machine has CPUs keeps them busier (docs/measurements.md, "make test in 15 minutes").
JOBS = default_jobs() + 1


def test_every_broken_proxy_is_still_a_small_edit_of_the_reference() -> None:
    assert len(VARIANTS) == 32
    reference = REFERENCE.read_text()
    for name in VARIANTS:
        source = broken_source(name)
        assert source != reference, name
        compile(source, f"{name}.py", "exec")
        assert expected_failures(name) <= set(ALL_IDS), name
    assert sorted(set(VARIANTS) - set(LAB_VARIANTS)) == ["log_in_process"]


REFERENCES = {"reference", "aiohttp-reference", "over-aiohttp"}


def _expected(name: str) -> set[str]:
    return set() if name in REFERENCES else lab_failures(name)


def _failed(report: SubmissionReport) -> set[str]:
    return {r.id for r in report.results if r.status == "failed"}


def _as_expected(report: SubmissionReport) -> bool:
    return _failed(report) == _expected(report.name) and report.problem is None


@dataclass(frozen=True)
class Graded:
    """Both tables' submissions and their reports, graded in one class: the stubbed regions fill
    the lanes the verdict table's last gradings leave idle."""

    verdict: list[Submission]
    verdict_reports: list[SubmissionReport]
    regions: list[Submission]
    region_reports: list[SubmissionReport]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    folder = tmp_path_factory.mktemp("graded")
    verdict = [
        Submission("reference", REFERENCE),
        Submission("aiohttp-reference", Path(solutions.aiohttp_proxy.__file__)),
        # notebook 02 says this one-line change of the client keeps full marks
        Submission("over-aiohttp", write_observed("over_aiohttp", folder)),
    ]
    verdict += [Submission(name, write_variant(name, folder)) for name in LAB_VARIANTS]
    regions = []
    for function in region_functions():
        path = folder / f"stubbed_{function}.py"
        path.write_text(stubbed_one_region(function), encoding="utf-8")
        regions.append(Submission(function, path))
    reports = grade_many([*verdict, *regions], Rubric(), jobs=JOBS)
    return Graded(verdict, reports[: len(verdict)], regions, reports[len(verdict) :])


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: the class of both tables, JOBS gradings at a time
@pytest.mark.heavy
@pytest.mark.sockets
def test_verdict_table(graded: Graded) -> None:
    # Each submission is graded once, beside others, as a class is. No second grading: a verdict
    # that comes out wrong once is a learner graded by chance, and fails the table.
    reports = graded.verdict_reports
    table, wrong = [], []
    for report in reports:
        # An inconclusive check (the machine paused twice, see runner.ATTEMPTS) is neither a
        # pass nor a fail: it shows as "?" and only matters if a failure was expected there.
        failed = _failed(report)
        undecided = {r.id for r in report.results if r.inconclusive}
        expected = _expected(report.name)
        marks = " ".join("F" if i in failed else "?" if i in undecided else "." for i in CHECK_IDS)
        table.append(f"{report.name:<24} {marks}  {report.elapsed_s:5.1f} s")
        if not _as_expected(report):
            wrong.append(f"{report.name}: failed {sorted(failed)}, expected {sorted(expected)}")
            wrong += [f"    {r} {dict(r.evidence)}" for r in report.results]
        for result in report.results:
            assert not re.search(r"\d", result.verdict), result  # nbval compares verdicts
    print("\n".join(["", "verdict table (F = failed, ? = inconclusive):", *table]), file=sys.stderr)
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: the class of both tables, if this test runs first
@pytest.mark.heavy
@pytest.mark.sockets
def test_every_solution_region_carries_a_graded_property(graded: Graded) -> None:
    """The second table: the reference with one solution region stubbed (as the learner bundle
    has it: the stand-in, or a raise) fails at least one check, and every check fails for at
    least one stubbed region. No region is dead weight; no check passes on given code alone."""
    functions = [s.learner for s in graded.regions]
    assert len(functions) == len(set(functions)), "one region per function"
    reports = graded.region_reports

    table, dead = [], []
    caught: set[str] = set()
    for report in reports:
        failed = _failed(report)
        caught |= failed
        marks = " ".join("F" if check_id in failed else "." for check_id in CHECK_IDS)
        table.append(f"{report.name:<18} {marks}")
        if not failed:
            dead.append(report.name)
    print("\n".join(["", "stubbed region (F = failed):", *table]), file=sys.stderr)
    assert not dead, f"stubbing these regions fails no check: {dead}"
    assert caught == set(CHECK_IDS), f"checks no stubbed region fails: {set(CHECK_IDS) - caught}"
