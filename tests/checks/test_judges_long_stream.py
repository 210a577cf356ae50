"""``long_stream`` judges what the client saw, in process: every verdict, and the advice that
names the first token's delay. (The experiment runs over real sockets in the grader's mutation
table: ``default_timeout``.)"""

from __future__ import annotations

from labkit.checks.long_stream import SCENARIO, Observed, judge
from labkit.checks.machine import Budget

ONE_CPU = Budget(cpus=1.0)


def seen(
    status: int | None = 200,
    terminal: str = "done",
    first_token: float | None = 6.02,
    upstream_state: str | None = "completed",
) -> Observed:
    return Observed(status, terminal, first_token, 9.1, upstream_state, 120)


def test_a_stream_that_ends_with_done_passes_with_its_evidence() -> None:
    result = judge(seen(), ONE_CPU)
    assert result.passed
    assert result.verdict == "a slow first token and a long generation reach the client"
    assert dict(result.evidence) == {
        "status": 200,
        "terminal": "done",
        "client_first_token_ms": 6020,
        "client_total_ms": 9100,
        "upstream_state": "completed",
        "upstream_tokens": 120,
    }


def test_a_stream_cut_before_its_first_token_is_named_so() -> None:
    result = judge(
        seen(status=502, terminal="error", first_token=None, upstream_state="cancelled"), ONE_CPU
    )
    assert result.verdict == "the stream failed while the upstream was preparing its first token"
    assert f"here a {SCENARIO['ttft_ms'] / 1000:g} s first token" in result.hint
    assert result.hint.startswith("07_heartbeats_and_timeouts: give every phase")


def test_a_stream_cut_after_its_first_token_is_named_so() -> None:
    result = judge(seen(terminal="truncated"), ONE_CPU)
    assert result.verdict == "the stream failed before the generation finished"


def test_done_without_a_success_status_is_not_a_pass() -> None:
    assert not judge(seen(status=500), ONE_CPU).passed
    assert not judge(seen(status=None, terminal="done", first_token=None), ONE_CPU).passed
