"""``upstream_status``: an upstream 429/5xx before the stream reaches the client as that status.

Experiment, with the real ``openai`` SDK (``max_retries=0``, so each request is sent once):

- the upstream answers 429 with ``Retry-After: 7``: the SDK must raise ``RateLimitError`` with
  status 429 and the same ``Retry-After`` header (clients and SDKs use it to back off);
- the upstream answers 503: the SDK must raise ``InternalServerError`` with status 503.

A proxy that has already sent ``200`` and then reports the problem (or turns it into its own
500) makes clients retry wrongly or not at all. Each request is given up after LIMIT_S (5 s at
one CPU, stretched below it with the run's ``Budget``). ``observe`` runs the two requests,
``judge`` decides (tested in process: tests/checks/test_judges_upstream_status.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from labkit.checks.context import CheckContext, Outcome
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.sdk_stream import SdkStream, read_with_sdk

ID = "upstream_status"
STEP = "06_midstream_errors"
SUMMARY = "an upstream 429/5xx before the stream keeps its status and Retry-After"
BUDGET_S = 6.0
MOCK_ONLY = "needs fault injection, which only the mock does (an error status before the stream)"
LIMITED_SEED, UNAVAILABLE_SEED = 4601, 4602
RETRY_AFTER = "7"
LIMIT_S = 5.0

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """How the SDK read the rate-limited request and the unavailable one."""

    limited: SdkStream
    unavailable: SdkStream


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)
    limited, unavailable = await asyncio.gather(
        read_with_sdk(ctx, {"status": 429, "retry_after": int(RETRY_AFTER)}, LIMITED_SEED, limit),
        read_with_sdk(ctx, {"status": 503}, UNAVAILABLE_SEED, limit),
    )
    return Observed(limited, unavailable)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the SDK saw 429 with Retry-After RETRY_AFTER, and 503 (nothing timed: ``budget``
    moves nothing)."""
    limited, unavailable = observed.limited, observed.unavailable
    evidence = {
        "rate_limited_status": limited.status,
        "rate_limited_retry_after": limited.retry_after,
        "rate_limited_sdk_raised": limited.raised,
        "unavailable_status": unavailable.status,
        "unavailable_sdk_raised": unavailable.raised,
    }
    statuses_kept = limited.status == 429 and unavailable.status == 503
    if statuses_kept and limited.retry_after == RETRY_AFTER:
        return result.passed(
            "the upstream's error status and Retry-After reach the client", evidence
        )
    if limited.status == 200 or unavailable.status == 200:
        verdict = "an upstream error status reached the client as a success"
    elif not statuses_kept:
        verdict = "an upstream error status reached the client as a different status"
    else:
        verdict = "the upstream's Retry-After header was lost"
    return result.failed(
        verdict,
        evidence,
        "read the upstream's status before you start the stream; if it is an error, return "
        "a response with that status, its JSON body and its Retry-After header.",
    )
