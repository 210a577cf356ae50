"""Running checks against a live proxy, as a notebook does: results, skips, failures, budgets."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from labkit import CheckResult, arun_checks, run_checks
from labkit.checks import CHECK_IDS
from labkit.checks.catalogue import Check, select
from labkit.checks.context import CheckContext
from labkit.checks.machine import Budget
from labkit.checks.runner import run_one
from labkit.servers import ServerHandle


def decided(result: CheckResult, budget: Budget) -> CheckResult:
    """The judge of a test's check whose experiment decides by itself."""
    return result


@pytest.mark.sockets
def test_reference_passes_the_quick_checks_in_catalogue_order(
    reference_proxy: ServerHandle, mock: ServerHandle, usage_log: Path
) -> None:
    results = run_checks(
        reference_proxy.url,
        upstream_url=mock.url,
        usage_log=usage_log,
        only=["usage", "trickle", "upstream_status", "midstream_error"],
    )
    assert [r.id for r in results] == ["trickle", "usage", "midstream_error", "upstream_status"]
    assert all(r.passed for r in results), [str(r) for r in results]
    assert str(results[0]) == "PASS trickle: tokens reach the client as the upstream generates them"


@pytest.mark.sockets
def test_reference_passes_the_incident_checks(
    reference_proxy: ServerHandle, mock: ServerHandle, usage_log: Path
) -> None:
    """The checks for bugs real gateways shipped: comments as data, an early error made an
    empty success, parallel tool calls merged, usage on a chunk with choices dropped."""
    results = run_checks(
        reference_proxy.url,
        upstream_url=mock.url,
        usage_log=usage_log,
        only=["passthrough", "error_before_first_token", "tool_calls", "usage"],
    )
    assert [str(r) for r in results] == [
        "PASS usage: the usage log has the upstream's counts once per request with the right "
        "outcome",
        "PASS passthrough: upstream SSE comments never reach the client as data; the SDK reads "
        "to the end",
        "PASS error_before_first_token: an upstream error before the first token reaches the "
        "client as an error event and is logged as an error",
        "PASS tool_calls: parallel tool calls keep their own index and id; the SDK assembles both",
    ], [dict(r.evidence) for r in results if not r.passed]
    assert results[2].evidence["log_outcomes"] == "error"


@pytest.mark.sockets
def test_an_early_error_is_judged_on_the_stream_alone_without_a_usage_log(
    reference_proxy: ServerHandle, mock: ServerHandle
) -> None:
    [result] = run_checks(
        reference_proxy.url, upstream_url=mock.url, only="error_before_first_token"
    )
    assert result.passed and "log_outcomes" not in result.evidence
    assert result.verdict == (
        "an upstream error before the first token reaches the client as an error event"
    )


@pytest.mark.sockets
def test_usage_is_skipped_without_a_usage_log(
    reference_proxy: ServerHandle, mock: ServerHandle
) -> None:
    [result] = run_checks(reference_proxy.url, upstream_url=mock.url, only="usage")
    assert result.skipped and not result.passed
    assert str(result) == "SKIP usage: skipped: no usage log to read"


@pytest.mark.sockets
def test_an_unreachable_proxy_is_a_failed_check_not_an_exception(mock: ServerHandle) -> None:
    [result] = run_checks("http://127.0.0.1:9", upstream_url=mock.url, only=["trickle"])
    assert not result.passed
    assert result.verdict == "the proxy could not be reached"
    assert result.hint.startswith("02_forwarding_proxy: ")


def test_a_check_over_its_budget_fails_with_a_plain_verdict() -> None:
    async def endless(ctx: CheckContext) -> CheckResult:
        await asyncio.sleep(60)
        raise AssertionError("unreachable")

    check = Check("midstream_error", "06_midstream_errors", "never ends", 0.05, endless, decided)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=Budget(cpus=1.0))
    result = asyncio.run(run_one(check, ctx))
    assert result.verdict == "the check ran out of time: the proxy stopped answering"
    assert result.evidence == {"budget_s": 0.05}
    # Bug: the hint always named step 02, even for a stream that heartbeats for ever in step 06.
    # Fix: a check that runs out of time points to the step that teaches its own property.
    assert result.hint.startswith("06_midstream_errors: ")


def test_unknown_check_ids_are_named_in_the_error() -> None:
    with pytest.raises(ValueError, match=r"got unknown cancelled, trikle\. Fix the spelling"):
        select(["trikle", "cancelled", "usage"])
    assert select(None) == CHECK_IDS


def test_no_two_checks_tag_their_requests_with_the_same_seed() -> None:
    """Bug: tool_calls and error_before_first_token first reused long_stream's and
    upstream_status's seeds, so a check running in another lane could read their mock records
    as its own. Fix: every seed (a check's ``*SEED*`` constants, usage's requests, concurrency's
    range) belongs to one check only."""
    import importlib

    from labkit.checks import CHECKS, concurrency, usage

    owners: dict[int, set[str]] = {}
    for check in CHECKS:
        module = importlib.import_module(check.observe.__module__)
        seeds = {v for k, v in vars(module).items() if "SEED" in k and isinstance(v, int)}
        if module is usage:
            seeds |= {seed for seed, _, _ in usage.REQUESTS.values()}
        if module is concurrency:
            seeds |= set(
                range(concurrency.FIRST_SEED, concurrency.FIRST_SEED + concurrency.STREAMS)
            )
        for seed in seeds:
            owners.setdefault(seed, set()).add(module.__name__)
    shared = {seed: names for seed, names in owners.items() if len(names) > 1}
    assert not shared


def test_run_checks_takes_exactly_the_parameters_of_arun_checks() -> None:
    """The blocking twin passes everything on, so a parameter added to one is in both."""
    blocking = inspect.signature(run_checks).parameters
    assert blocking == inspect.signature(arun_checks).parameters
    assert {"upstream_token", "exclusive"} <= set(blocking)


def test_a_run_for_half_a_cpu_gives_each_check_twice_its_budget() -> None:
    """The run's Budget, not a process-wide reading, sets its limits and its evidence."""

    async def never_answers(ctx: CheckContext) -> CheckResult:
        await asyncio.sleep(5)
        raise AssertionError("the budget should have stopped it")

    check = Check("trickle", "01_baseline_streaming", "summary", 0.05, never_answers, decided)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=Budget(cpus=0.5))
    result = asyncio.run(run_one(check, ctx))
    assert not result.passed
    assert result.evidence == {"budget_s": 0.1, "cpus": 0.5}
    assert Budget(cpus=0.25).describe() == (
        "0.25 CPU: time budgets x4 (the most they stretch: below this, expect inconclusive checks)"
    )
