"""``cancel`` and ``cancel_before_first_token``: a client that leaves stops the upstream.

``cancel``: a 20 s generation (20 tokens/s); the client hangs up after 1.2 s. Pass: the mock
records the request as ``cancelled`` within MAX_STOP_S (1 s) of the hang-up. A proxy that
cancels needs a few ms, one token interval at most (tens of ms on half a CPU, a few hundred
for a proxy that blocks its event loop); one that does not leaves the upstream running for
another ~19 s.

``cancel_before_first_token``: the first token takes 1.5 s; the client hangs up after 0.4 s.
Pass: the mock records ``cancelled`` within MAX_STOP_S and never produced a token. The token
count is the robust half: a proxy that waits for the upstream's first byte before it returns
its response (outside the body, where Starlette does not watch for a disconnect) only notices
the hang-up at the first token, 1.1 s too late, so the upstream has made that token, whatever
the machine's speed. (Only if the proxy sends a heartbeat before the first token does the late
notice come earlier; then the time bound catches it.) The first token stays due before the
reference's first heartbeat (2 s) for that reason.

Both disconnect on a timer rather than after N tokens, so a buffering proxy is judged on
cancellation alone.
"""

from __future__ import annotations

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished, ms
from labkit.checks.result import CheckResult

STEP = "04_cancel_on_disconnect"
MAX_STOP_S = 1.0  # from the client's hang-up to the upstream's stop
WAIT_S = 2.0  # how long we watch the record after the hang-up

CANCEL_SEED = 4201
CANCEL_SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 400}
CANCEL_AFTER_S = 1.2

EARLY_SEED = 4301
EARLY_SCENARIO = {"ttft_ms": 1500, "tps": 20, "tokens": 20}
EARLY_AFTER_S = 0.4

cancel_result = Outcome("cancel", STEP)
early_result = Outcome("cancel_before_first_token", STEP)


async def _hang_up(
    ctx: CheckContext, seed: int, scenario: dict[str, int], after_s: float
) -> tuple[float, Record | None]:
    """Stream, hang up after ``after_s``; return the hang-up time and the record as it ends up."""
    capture = await acapture_stream(
        ctx.chat_url, json=chat_body(seed, scenario), disconnect_after_s=after_s, timeout=10
    )
    hung_up_at = capture.started_at + capture.total_time
    record = await ctx.record(seed, until=finished, wait_s=WAIT_S)
    return hung_up_at, record


def _evidence(hung_up_at: float, record: Record) -> dict[str, int | str | None]:
    stopped = record.get("ended_at") if record.get("state") != "running" else None
    return {
        "upstream_state": record.get("state"),
        "upstream_stop_after_hangup_ms": None if stopped is None else ms(stopped - hung_up_at),
        "tokens_generated": record.get("tokens_generated"),
        "tokens_after_disconnect": record.get("tokens_after_disconnect"),
    }


def _stopped_in_time(record: Record, hung_up_at: float) -> bool:
    ended = record.get("ended_at")
    return (
        record.get("state") == "cancelled"
        and ended is not None
        and ended - hung_up_at <= MAX_STOP_S
    )


async def check_cancel(ctx: CheckContext) -> CheckResult:
    hung_up_at, record = await _hang_up(ctx, CANCEL_SEED, CANCEL_SCENARIO, CANCEL_AFTER_S)
    if record is None:
        return cancel_result.failed(
            "the request never reached the upstream",
            {},
            "forward POST /v1/chat/completions to the upstream with its JSON body.",
            step="02_forwarding_proxy",
        )
    evidence = _evidence(hung_up_at, record)
    if _stopped_in_time(record, hung_up_at):
        return cancel_result.passed("the upstream stopped soon after the client left", evidence)
    if record.get("state") == "running":
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return cancel_result.failed(
        verdict,
        evidence,
        "read the upstream inside the response body generator and close the upstream "
        "response when it is cancelled (async with, or aclose() in a finally block).",
    )


async def check_cancel_before_first_token(ctx: CheckContext) -> CheckResult:
    hung_up_at, record = await _hang_up(ctx, EARLY_SEED, EARLY_SCENARIO, EARLY_AFTER_S)
    if record is None:
        return early_result.failed(
            "the request never reached the upstream",
            {},
            "forward POST /v1/chat/completions to the upstream with its JSON body.",
            step="02_forwarding_proxy",
        )
    evidence = _evidence(hung_up_at, record)
    if _stopped_in_time(record, hung_up_at) and not record.get("tokens_generated"):
        return early_result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if record.get("state") == "running" or record.get("tokens_generated"):
        verdict = "the upstream went on to its first token after the client had left"
    else:
        verdict = "the upstream did not stop promptly when the client left early"
    return early_result.failed(
        verdict,
        evidence,
        "close the upstream when the body generator is cancelled, and do not wait for the "
        "upstream's first byte in the route function: read it inside the body generator, "
        "where Starlette notices the disconnect.",
    )
