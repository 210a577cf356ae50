"""``error_before_first_token`` judges how the SDK read the stream and what the usage log says,
in process: both ways an early error may arrive, a log that is missing (judged on the stream
alone) against one that lacks this request, and every verdict. (The experiment runs over real
sockets in the grader's mutation table: ``skips_idless_events``.)"""

from __future__ import annotations

import pytest

from labkit.checks.error_before_first_token import ARRIVES_AS, Observed, judge
from labkit.checks.machine import Budget
from labkit.checks.sdk_stream import Ending, SdkStream

ONE_CPU = Budget(cpus=1.0)


def sdk(ending: Ending = "error_event", text: int = 0) -> SdkStream:
    return SdkStream(ending, text, 1, "APIError: the upstream failed", "APIError")


def seen(
    ending: Ending = "error_event",
    text: int = 0,
    outcomes: tuple[str, ...] | None = ("error",),
    *,
    log_empty: bool = False,
) -> Observed:
    return Observed(sdk(ending, text), True, "errored", outcomes, log_empty)


@pytest.mark.parametrize("ending", list(ARRIVES_AS))
def test_an_early_error_as_an_event_or_a_status_passes_when_logged_as_an_error(
    ending: Ending,
) -> None:
    result = judge(seen(ending), ONE_CPU)
    assert result.passed
    assert result.verdict == (
        f"an upstream error before the first token reaches the client as {ARRIVES_AS[ending]} "
        "and is logged as an error"
    )
    assert dict(result.evidence) == {
        "sdk_ending": ending,
        "sdk_chunks": 1,
        "upstream_state": "errored",
        "log_outcomes": "error",
    }


def test_without_a_usage_log_the_stream_alone_is_judged() -> None:
    result = judge(seen(outcomes=None), ONE_CPU)
    assert result.verdict == (
        "an upstream error before the first token reaches the client as an error event"
    )
    assert "log_outcomes" not in result.evidence


def test_a_log_with_no_line_at_all_is_left_to_usage() -> None:
    result = judge(seen(outcomes=(), log_empty=True), ONE_CPU)
    assert result.passed
    assert result.verdict.endswith("as an error event")
    assert result.evidence["log_outcomes"] is None


def test_a_log_with_lines_but_none_for_this_request_fails() -> None:
    result = judge(seen(outcomes=()), ONE_CPU)
    assert result.verdict == (
        "the usage log has no line for a request that failed before its first token"
    )


def test_a_log_that_also_says_completed_fails() -> None:
    for outcomes in (("completed",), ("error", "completed")):
        result = judge(seen(outcomes=outcomes), ONE_CPU)
        assert result.verdict == (
            "the usage log records an upstream error before the first token as a success"
        )
        assert result.hint.startswith("06_midstream_errors: look for a top-level error key")


@pytest.mark.parametrize(
    ("ending", "text", "verdict"),
    [
        (
            "finished",
            0,
            "an upstream error before the first token became an empty successful completion",
        ),
        ("hung", 0, "the stream hung after the upstream failed before its first token"),
        ("connection", 0, "the connection broke instead of carrying the upstream's early error"),
        ("error_event", 12, "the stream carried text although the upstream sent none"),
        ("status", 1, "the stream carried text although the upstream sent none"),
    ],
)
def test_every_way_the_stream_goes_wrong_is_named(ending: Ending, text: int, verdict: str) -> None:
    assert judge(seen(ending, text), ONE_CPU).verdict == verdict


def test_a_request_that_never_reached_the_upstream_fails() -> None:
    result = judge(Observed(sdk("status"), reached_upstream=False), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert dict(result.evidence) == {"sdk_ending": "status"}
    assert result.hint.startswith("02_forwarding_proxy:")
