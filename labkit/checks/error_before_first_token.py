"""``error_before_first_token``: an upstream that answers 200 and then fails before its first
token reaches the client as an error the OpenAI SDK raises, and the usage log says ``error``:
never an empty successful completion.

vLLM answers a generation that fails early with a 200 whose first event is
``data: {"error": {...}}``, then ``data: [DONE]`` (vllm-project/vllm#40986 fixed the engine
side, where the error was filtered out as an empty chunk). A gateway that drops events that do
not look like the answer yet (no id, no choices) forwards only the ``[DONE]``: the client gets
a successful completion with no text, and the bill says ``completed``.

Experiment: one stream through the real ``openai`` SDK from an upstream whose first event is the
error (``error_after=0``), followed by ``[DONE]`` (``done_after_error``). Pass: the SDK raises
``openai.APIError`` with no text before it, either for the in-stream error event (as the lab's
proxy forwards it) or for an error status (from a gateway that reads the first event before it
answers, as LiteLLM does: nothing has been streamed yet, so a status is honest too), but never
for a broken connection; and, when there is a usage log, the lines written for this request (its
upstream id, or no id: the proxy never saw one) say ``error`` and none says ``completed``. A
proxy that writes no usage log at all is judged on the stream alone (``usage`` reports the
missing log). No time is measured. ``observe`` reads the stream and the log, ``judge`` decides
(tested in process: tests/checks/test_judges_error_before_first_token.py). The stream is given
up after LIMIT_S and the log waited for LOG_WAIT_S, both stretched with the run's ``Budget``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from labkit.checks.context import CheckContext, Outcome, finished
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.sdk_stream import SdkStream, read_with_sdk
from labkit.checks.usage import LOG_WAIT_S, read_log

ID = "error_before_first_token"
STEP = "06_midstream_errors"
SUMMARY = "a 200 whose first event is an error stays an error, in the stream and the log"
BUDGET_S = 25.0
MOCK_ONLY = (
    "needs fault injection, which only the mock does (an error event before the first token)"
)
SEED = 5201
SCENARIO = {"ttft_ms": 100, "tps": 50, "tokens": 20, "error_after": 0, "done_after_error": True}
# Generous: a gateway that retries the failed upstream before it answers (LiteLLM makes three
# attempts, 5-7 s in all) must get to answer; a correct proxy answers in milliseconds.
LIMIT_S = 20.0

# How the SDK may see the error, for a pass.
ARRIVES_AS = {"error_event": "an error event", "status": "an error status"}

result = Outcome(ID, STEP)

ADVICE = (
    "look for a top-level error key in every upstream event, the first one included, before "
    "anything that skips events without an id or choices: forward the error event, log the "
    "outcome error, and end the stream there."
)


async def _log_outcomes(ctx: CheckContext, upstream_id: str | None, before: int) -> list[str]:
    """The outcomes of the log lines written for this request since ``before`` lines."""
    assert ctx.usage_log is not None
    deadline = time.monotonic() + ctx.budget.stretch(LOG_WAIT_S)
    while True:
        lines, _ = read_log(ctx.usage_log)
        ours = [e for e in lines[before:] if e.get("id") in (None, upstream_id)]
        if ours or time.monotonic() >= deadline:
            return [str(e.get("outcome")) for e in ours]
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class Observed:
    """How the SDK read the stream; the mock's record of it (its state; ``reached_upstream``
    False: it never arrived); and, when the proxy has a usage log, the outcomes of the lines
    written for this request (``log_outcomes`` None: no usage log to read) and whether the log
    had any line at all (``log_empty``)."""

    sdk: SdkStream
    reached_upstream: bool
    upstream_state: str | None = None
    log_outcomes: tuple[str, ...] | None = None
    log_empty: bool = False


async def observe(ctx: CheckContext) -> Observed:
    before = len(read_log(ctx.usage_log)[0]) if ctx.usage_log is not None else 0
    sdk = await read_with_sdk(ctx, SCENARIO, SEED, ctx.budget.stretch(LIMIT_S))
    record = await ctx.record(SEED, until=finished)
    if record is None:
        return Observed(sdk, reached_upstream=False)
    if ctx.usage_log is None:
        return Observed(sdk, True, record.get("state"))
    outcomes = await _log_outcomes(ctx, record.get("id"), before)
    empty = not outcomes and not read_log(ctx.usage_log)[0]
    return Observed(sdk, True, record.get("state"), tuple(outcomes), empty)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the SDK raised for an error event or an error status, with no text before it, and
    the log lines for the request say ``error`` and never ``completed`` (judged on the stream
    alone when no usage log was written at all)."""
    sdk = observed.sdk
    if not observed.reached_upstream:
        return result.never_reached({"sdk_ending": sdk.ending})
    evidence: dict[str, Any] = {
        "sdk_ending": sdk.ending,
        "sdk_chunks": sdk.chunks,
        "upstream_state": observed.upstream_state,
    }
    outcomes: tuple[str, ...] | None = None
    if observed.log_outcomes is not None:
        outcomes = observed.log_outcomes
        evidence["log_outcomes"] = ",".join(outcomes) or None
        if observed.log_empty:
            outcomes = None  # no usage log written at all: that is for ``usage`` to say
    logged_ok = outcomes is None or ("error" in outcomes and "completed" not in outcomes)
    if sdk.ending in ARRIVES_AS and not sdk.text_chars and logged_ok:
        logged = "" if outcomes is None else " and is logged as an error"
        return result.passed(
            "an upstream error before the first token reaches the client as "
            + ARRIVES_AS[sdk.ending]
            + logged,
            evidence,
        )
    if sdk.ending == "finished":
        verdict = "an upstream error before the first token became an empty successful completion"
    elif sdk.ending == "hung":
        verdict = "the stream hung after the upstream failed before its first token"
    elif sdk.ending == "connection":
        verdict = "the connection broke instead of carrying the upstream's early error"
    elif sdk.text_chars:
        verdict = "the stream carried text although the upstream sent none"
    elif outcomes is not None and not outcomes:
        verdict = "the usage log has no line for a request that failed before its first token"
    else:
        verdict = "the usage log records an upstream error before the first token as a success"
    return result.failed(verdict, evidence, ADVICE)
