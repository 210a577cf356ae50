"""``upstream_status`` judges how the SDK saw a 429 and a 503, in process: every verdict, in the
order a learner should fix them. (The experiment runs over real sockets in the grader's mutation
table: ``status_as_200``, ``no_retry_after``.)"""

from __future__ import annotations

from labkit.checks.machine import Budget
from labkit.checks.sdk_stream import Ending, SdkStream
from labkit.checks.upstream_status import RETRY_AFTER, Observed, judge

ONE_CPU = Budget(cpus=1.0)


def sdk(status: int, retry_after: str | None = None, raised: str = "APIStatusError") -> SdkStream:
    ending: Ending = "finished" if status == 200 else "status"
    return SdkStream(ending, 0, 0, "", raised if status != 200 else "nothing", status, retry_after)


def test_both_statuses_and_the_retry_after_pass_with_their_evidence() -> None:
    result = judge(
        Observed(sdk(429, RETRY_AFTER, "RateLimitError"), sdk(503, None, "InternalServerError")),
        ONE_CPU,
    )
    assert result.passed
    assert result.verdict == "the upstream's error status and Retry-After reach the client"
    assert dict(result.evidence) == {
        "rate_limited_status": 429,
        "rate_limited_retry_after": RETRY_AFTER,
        "rate_limited_sdk_raised": "RateLimitError",
        "unavailable_status": 503,
        "unavailable_sdk_raised": "InternalServerError",
    }


def test_an_error_status_turned_into_a_success_is_named_first() -> None:
    for observed in (Observed(sdk(200), sdk(503)), Observed(sdk(429, RETRY_AFTER), sdk(200))):
        result = judge(observed, ONE_CPU)
        assert result.verdict == "an upstream error status reached the client as a success"
        assert result.hint.startswith("06_midstream_errors: read the upstream's status")


def test_an_error_status_turned_into_another_is_named() -> None:
    for observed in (Observed(sdk(500), sdk(503)), Observed(sdk(429, RETRY_AFTER), sdk(502))):
        assert judge(observed, ONE_CPU).verdict == (
            "an upstream error status reached the client as a different status"
        )


def test_a_lost_or_changed_retry_after_fails() -> None:
    for retry_after in (None, "8", f"{RETRY_AFTER}.0"):
        result = judge(Observed(sdk(429, retry_after), sdk(503)), ONE_CPU)
        assert result.verdict == "the upstream's Retry-After header was lost"
