"""A part the learner has not written yet fails the checks that need it, by name, unrun."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.checks import CHECK_IDS
from labkit.grading.grader import agrade_file, unwritten_results
from labkit.regions import strip_solutions, unwritten
from labkit.student import stub_proxy

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = (ROOT / "solutions" / "proxy.py").read_text(encoding="utf-8")
NOTEBOOKS = ROOT / "notebooks"


def bundle_proxy() -> str:
    return stub_proxy(SOLUTION, NOTEBOOKS)[0]


def stub_only(*functions: str) -> str:
    """The solution with only these functions' regions stubbed, as the bundle stubs them."""
    owners = {u.function: u.notebook for u in unwritten(bundle_proxy())}
    stubbed, _ = strip_solutions(
        SOLUTION, kind="code", owner=lambda r: owners[r.function], only=functions
    )
    return stubbed


def test_a_bundle_proxy_fails_every_check_naming_the_first_parts_to_write() -> None:
    results = unwritten_results(bundle_proxy(), CHECK_IDS)
    assert set(results) == set(CHECK_IDS)
    assert results["trickle"].verdict == (
        "not written yet: make_client, chat_completions (notebook 02_forwarding_proxy)"
    )
    assert results["backpressure"].verdict == (
        "not written yet: make_client, chat_completions (notebook 02_forwarding_proxy); "
        "then parts of notebooks 03, 04, 05, 06, 07, 10"
    )
    assert results["keepalive"].verdict.endswith("notebooks 03, 04, 05, 06, 07")
    only_queue = unwritten_results(stub_only("make_queue"), CHECK_IDS)
    assert only_queue["backpressure"].verdict == (
        "not written yet: make_queue (notebook 10_backpressure_and_slow_clients)"
    )
    assert results["usage"].hint == (
        "go back to notebook 02_forwarding_proxy, write make_client in its build-it cell, "
        "run that cell, then check again."
    )


# notebook 15's checks need every part before them too
RESUMABLE = {"resume", "resume_twice", "resume_stop", "resume_grace", "replay_bound"}


@pytest.mark.parametrize(
    ("functions", "failing"),
    [
        (("make_queue",), {"backpressure", *RESUMABLE}),
        (
            ("next_item",),
            {
                "long_stream",
                "keepalive",
                "keepalive_under_comments",
                "integrity",
                "backpressure",
                "passthrough",
                "tool_calls",
                *RESUMABLE,
            },
        ),
        (("stop_stream",), RESUMABLE),
        (("produce", "follow", "resume_stream"), RESUMABLE),
        (("while_connected",), set(CHECK_IDS) - {"trickle", "concurrency"}),
        (("sse_events",), set(CHECK_IDS) - {"trickle", "concurrency"}),
    ],
)
def test_a_part_blocks_only_the_checks_taught_in_its_notebook_and_after(
    functions: tuple[str, ...], failing: set[str]
) -> None:
    assert set(unwritten_results(stub_only(*functions), CHECK_IDS)) == failing


def test_grading_a_bundle_proxy_scores_zero_without_starting_anything(tmp_path: Path) -> None:
    proxy = tmp_path / "proxy.py"
    proxy.write_text(bundle_proxy())
    report = asyncio.run(agrade_file(proxy))
    assert report.score == 0 and report.problem is None
    assert [r.id for r in report.results] == list(CHECK_IDS)
    assert all(r.verdict.startswith("not written yet: make_client") for r in report.results)
    assert report.elapsed_s < 5  # nothing was started


@pytest.mark.slow
@pytest.mark.sockets
def test_a_bundle_proxy_run_for_real_passes_no_check(tmp_path: Path) -> None:
    """Without the precheck, the stubs themselves fail every check: nothing given passes."""
    proxy = tmp_path / "proxy.py"
    proxy.write_text(bundle_proxy())
    report = asyncio.run(agrade_file(proxy, precheck=False))
    assert report.score == 0
    assert [r.id for r in report.results] == list(CHECK_IDS)
    assert not any(r.passed for r in report.results)
