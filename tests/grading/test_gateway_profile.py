"""``--profile gateway``: the slow case only a deployed gateway meets (``minute_stream``, a
stream of over a minute with 50 s of upstream silence, read by a client that hangs up after
30 s of idle), off by default and judged like every other check. Its judge is tested in process
in tests/checks/test_judges_minute_stream.py; here it observes real minute-long streams over
sockets, all at once, each proxy on a mock of its own in a child process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from grading_support import write_variant

from labkit import serve_subprocess
from labkit.checks import CHECK_IDS, CheckResult, arun_checks
from labkit.checks.catalogue import ALL_IDS, lanes_for, replicas_for, select
from labkit.checks.machine import Budget
from labkit.cli import main
from labkit.grading.rubric import Rubric


def test_the_lab_profile_is_the_default_and_the_gateway_profile_adds_the_deployed_cases() -> None:
    assert select(None) == CHECK_IDS
    assert {"minute_stream", "resume_replica"}.isdisjoint(CHECK_IDS)
    assert select(None, "gateway") == (*CHECK_IDS, "minute_stream", "resume_replica") == ALL_IDS
    assert select(["minute_stream", "trickle"]) == ("trickle", "minute_stream")
    lanes = lanes_for(select(None, "gateway"))
    assert ("minute_stream",) in lanes and ("resume_replica",) in lanes
    # two copies of the proxy for the replicas' lane alone; one for every other
    assert [replicas_for(lane) for lane in lanes].count(2) == 1
    assert replicas_for(("resume_replica",)) == 2 and replicas_for(("trickle", "cancel")) == 1


def test_an_unknown_profile_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match=r"got 'edge'\. Use profile=\"gateway\""):
        select(None, "edge")  # type: ignore[arg-type]


def test_a_minute_long_check_gets_a_time_limit_it_fits_in() -> None:
    rubric = Rubric()
    one = Budget(cpus=1.0)
    assert rubric.time_limit_s(CHECK_IDS, budget=one) == rubric.time_limit_s(budget=one)
    assert (
        rubric.time_limit_s(ALL_IDS, budget=one) >= 100 + 30
    )  # minute_stream's budget and a start margin


def test_a_class_is_not_graded_on_the_gateway_profile(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["grade-class", "x", "--out", "y", "--profile", "gateway"]
    assert main(argv) == 2
    assert "labkit grade-class: error: unrecognized arguments: --profile" in capsys.readouterr().err


# The reference, and three ways a gateway loses a long, mostly silent stream: two through the
# reference's own settings, from its environment (heartbeats rarer than the client's idle limit,
# an upstream read timeout shorter than the model's silence), and the broken proxy with no
# heartbeats at all.
SETTINGS = {
    "reference": {},
    "heartbeat_every_40s": {"HEARTBEAT_S": "40"},
    "upstream_idle_20s": {"UPSTREAM_IDLE_S": "20"},
}
BROKEN = ["no_heartbeat"]


@pytest.fixture
def minute_stream_results(tmp_path: Path) -> Iterator[dict[str, CheckResult]]:
    proxies = {name: ("solutions.proxy:app", env) for name, env in SETTINGS.items()}
    proxies |= {name: (str(write_variant(name, tmp_path)), {}) for name in BROKEN}
    with ExitStack() as stack:
        targets: dict[str, tuple[str, str]] = {}
        for name, (target, env) in proxies.items():
            mock = stack.enter_context(
                serve_subprocess("mock_upstream.served:app", name=f"minute-mock-{name}")
            )
            proxy = stack.enter_context(
                serve_subprocess(
                    target, name=f"minute-proxy-{name}", env={"UPSTREAM_URL": mock.url, **env}
                )
            )
            targets[name] = (proxy.url, mock.url)

        async def grade_all() -> list[list[CheckResult]]:
            return await asyncio.gather(
                *(arun_checks(p, upstream_url=u, only="minute_stream") for p, u in targets.values())
            )

        graded = asyncio.run(grade_all())
        yield {name: results[0] for name, results in zip(targets, graded, strict=True)}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.sockets
def test_minute_stream_passes_the_reference_and_fails_each_way_of_losing_it(
    minute_stream_results: dict[str, CheckResult],
) -> None:
    results = minute_stream_results
    shown = {name: (str(r), dict(r.evidence)) for name, r in results.items()}
    reference = results["reference"]
    assert str(reference) == (
        "PASS minute_stream: a stream of more than a minute, silent for most of it, reaches the "
        "client"
    ), shown
    assert reference.evidence["client_total_ms"] > 60_000, shown
    assert reference.evidence["tokens_received"] == reference.evidence["upstream_tokens"] == 64, (
        shown
    )

    rare = results["heartbeat_every_40s"]
    assert rare.status == "failed", shown
    assert rare.verdict == (
        "nothing reached the client for longer than its idle limit while the upstream was silent"
    ), shown
    assert rare.hint.startswith("07_heartbeats_and_timeouts: "), shown
    assert rare.evidence["longest_gap_between_bytes_ms"] >= 30_000, shown

    silent = results["no_heartbeat"]
    assert silent.verdict == rare.verdict, shown
    assert str(silent.evidence["transport_error"]).startswith("ReadTimeout"), shown
    assert silent.evidence["tokens_received"] < 64, shown

    impatient = results["upstream_idle_20s"]
    assert impatient.status == "failed", shown
    assert impatient.verdict == "the proxy gave up on the upstream during its silence", shown
