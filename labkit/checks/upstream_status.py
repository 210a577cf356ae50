"""``upstream_status``: an upstream 429/5xx before the stream reaches the client as that status.

Experiment, with the real ``openai`` SDK (``max_retries=0``, so each request is sent once):

- the upstream answers 429 with ``Retry-After: 7``: the SDK must raise ``RateLimitError`` with
  status 429 and the same ``Retry-After`` header (clients and SDKs use it to back off);
- the upstream answers 503: the SDK must raise ``InternalServerError`` with status 503.

A proxy that has already sent ``200`` and then reports the problem (or turns it into its own
500) makes clients retry wrongly or not at all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from labkit.checks.context import PROMPT, CheckContext, Outcome
from labkit.checks.result import CheckResult

ID = "upstream_status"
STEP = "06_midstream_errors"
LIMITED_SEED, UNAVAILABLE_SEED = 4601, 4602
RETRY_AFTER = "7"
LIMIT_S = 5.0

result = Outcome(ID, STEP)


async def _status_seen(ctx: CheckContext, seed: int, scenario: dict[str, int]) -> dict[str, Any]:
    """Send one streaming request with the SDK; return the status and Retry-After it saw."""
    import openai  # here, not at the top: importing labkit stays quick

    client = openai.AsyncOpenAI(
        base_url=ctx.sdk_base_url, api_key="lab-key", max_retries=0, timeout=LIMIT_S
    )
    try:
        async with asyncio.timeout(LIMIT_S):
            stream = await client.chat.completions.create(
                model="lab-model",
                messages=[{"role": "user", "content": PROMPT}],
                stream=True,
                extra_body={"mock": {**scenario, "seed": seed}},
            )
            async with stream:
                async for _ in stream:
                    pass
        return {"status": 200, "retry_after": None, "raised": "nothing"}
    except openai.APIStatusError as exc:
        return {
            "status": exc.status_code,
            "retry_after": exc.response.headers.get("retry-after"),
            "raised": type(exc).__name__,
        }
    except (openai.APIError, TimeoutError) as exc:
        return {"status": 200, "retry_after": None, "raised": type(exc).__name__}
    finally:
        await client.close()


async def check_upstream_status(ctx: CheckContext) -> CheckResult:
    limited, unavailable = await asyncio.gather(
        _status_seen(ctx, LIMITED_SEED, {"status": 429, "retry_after": int(RETRY_AFTER)}),
        _status_seen(ctx, UNAVAILABLE_SEED, {"status": 503}),
    )
    evidence = {
        "rate_limited_status": limited["status"],
        "rate_limited_retry_after": limited["retry_after"],
        "rate_limited_sdk_raised": limited["raised"],
        "unavailable_status": unavailable["status"],
        "unavailable_sdk_raised": unavailable["raised"],
    }
    statuses_kept = limited["status"] == 429 and unavailable["status"] == 503
    if statuses_kept and limited["retry_after"] == RETRY_AFTER:
        return result.passed(
            "the upstream's error status and Retry-After reach the client", evidence
        )
    if limited["status"] == 200 or unavailable["status"] == 200:
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
