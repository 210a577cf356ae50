"""``labkit grade --engine`` on the real engine, over real sockets: the reference passes every
check it runs there, and each broken proxy fails on the engine the engine-run checks it fails
on the mock (the grader's mutation table, ``broken/``), save the one the engine cannot show."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from grading_support import REFERENCE, VARIANTS, expected_failures, write_variant

from labkit.checks.catalogue import ENGINE_IDS
from labkit.cli import main
from labkit.engine import EngineHandle
from labkit.grading.engine_upstream import start_grading_engine
from labkit.grading.roster import Submission, grade_in_worker
from labkit.grading.rubric import Rubric
from tests.engine_support import require_engine_or_skip

pytestmark = [pytest.mark.sockets, pytest.mark.heavy]  # it starts the real engine

# What a broken proxy fails on the mock that the engine cannot make it fail, and why.
ENGINE_BLIND = {
    ("usage_only_without_choices", "usage"): "the engine puts its usage on a choices: [] chunk, "
    "never on one with choices, so taking it only from the former loses nothing there",
    ("default_pool", "concurrency"): "the engine has 4 slots, so its concurrency experiment "
    "runs 4 streams: a pool of 100 connections never fills there",
}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_reference_passes_every_check_it_runs_on_our_engine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The instructor's command as typed: it starts our engine, grades, stops it."""
    require_engine_or_skip()
    code = main(["grade", str(REFERENCE), "--engine", "--json"])
    report = json.loads(capsys.readouterr().out)
    checks = report["checks"]
    ran = {i for i, c in checks.items() if c["status"] != "skipped"}
    assert ran == set(ENGINE_IDS), checks
    assert all(checks[i]["status"] == "passed" for i in ENGINE_IDS), checks
    for check_id, check in checks.items():
        if check_id not in ENGINE_IDS:
            assert check["verdict"].startswith("not run on the engine: needs "), check
    assert report["upstream"].startswith("engine ")
    assert code == 0


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineHandle]:
    require_engine_or_skip()
    handle = start_grading_engine()
    yield handle
    handle.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)  # seven gradings one after another: about three minutes here
def test_broken_proxies_fail_on_the_engine_what_they_fail_on_the_mock(
    engine: EngineHandle, tmp_path: Path
) -> None:
    table, wrong = [], []
    for name in VARIANTS:
        expected = expected_failures(name) & set(ENGINE_IDS)
        if not expected:
            continue
        path = write_variant(name, tmp_path)
        only = sorted(expected, key=ENGINE_IDS.index)
        report = grade_in_worker(Submission(name, path), Rubric(), only=only, engine_url=engine.url)
        failed = {r.id for r in report.results if r.status == "failed"}
        blind = {i for i in expected if (name, i) in ENGINE_BLIND}
        table.append(
            f"{name:<28} expected {only}, failed {sorted(failed)} ({report.elapsed_s:.0f} s)"
        )
        if failed != expected - blind or report.problem is not None:
            wrong.append(f"{name}: failed {sorted(failed)}, expected {sorted(expected - blind)}")
            wrong += [f"    {r} {dict(r.evidence)}" for r in report.results]
        for result in report.results:
            assert not re.search(r"\d", result.verdict), result  # nbval compares verdicts
    print("\n".join(["", "on the engine:", *table]), file=sys.stderr)
    assert not wrong, "\n".join(wrong)
