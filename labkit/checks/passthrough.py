"""``passthrough``: upstream SSE comments reach the client as comments (or not at all), never as
data, and the OpenAI SDK still reads the stream to its end.

Real upstreams send comment lines of their own: OpenRouter sends ``: OPENROUTER PROCESSING``
while a request waits for its first token, sse-starlette pings. A comment is a line that starts
with a colon; every SSE client skips it. A proxy that re-frames what it reads and writes each
line it does not recognise back out as ``data:`` hands the client ``data: : OPENROUTER
PROCESSING``, which no SDK can parse (mnfst/llm-gateway#2053): the stream dies on its first
comment.

Experiment, two streams at once from an upstream that sends a comment every 100 ms (six
before the first token at 600 ms, then more between tokens):

- the real ``openai`` SDK reads one to the end;
- a raw capture of the other counts the data events that are neither JSON nor ``[DONE]``.

Pass: the SDK stream finishes with the text and raises nothing, and the raw stream ends with
``data: [DONE]`` and has no unreadable data event. Nothing is timed: a correct proxy passes on
any machine, and one broken this way fails on the first comment, every time. ``observe`` reads
the two streams, ``judge`` decides (tested in process: tests/checks/test_judges_passthrough.py).
Each stream is given up after LIMIT_S, stretched with the run's ``Budget``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.sdk_stream import SdkStream, read_with_sdk

ID = "passthrough"
STEP = "07_heartbeats_and_timeouts"
SUMMARY = "upstream SSE comments never reach the client as data"
BUDGET_S = 10.0
MOCK_ONLY = "needs SSE comments from the upstream, which only the mock sends"
SDK_SEED, RAW_SEED = 5101, 5102
COMMENT_EVERY_MS = 100
SCENARIO = {"ttft_ms": 600, "tps": 25, "tokens": 20, "comment_every_ms": COMMENT_EVERY_MS}
LIMIT_S = 8.0

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """How the SDK read one stream, and what a raw capture of the other showed: how it ended,
    its data events that are neither JSON nor ``[DONE]``, and its comments."""

    sdk: SdkStream
    raw_terminal: str
    raw_unreadable_data_events: int
    raw_comments: int


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)  # half a CPU: twice as long
    sdk, raw = await asyncio.gather(
        read_with_sdk(ctx, SCENARIO, SDK_SEED, limit),
        acapture_stream(ctx.chat_url, json=chat_body(RAW_SEED, SCENARIO), timeout=limit),
    )
    return Observed(sdk, raw.terminal, raw.malformed_events, len(raw.comments))


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the SDK finished with text, and the raw stream ended with ``[DONE]`` with no
    unreadable data event."""
    sdk = observed.sdk
    evidence = {
        "sdk_ending": sdk.ending,
        "sdk_text_chars": sdk.text_chars,
        "sdk_error": sdk.error or None,
        "raw_terminal": observed.raw_terminal,
        "raw_unreadable_data_events": observed.raw_unreadable_data_events,
        "raw_comments": observed.raw_comments,
        "upstream_comment_every_ms": COMMENT_EVERY_MS,
    }
    unreadable = observed.raw_unreadable_data_events
    if sdk.ending == "finished" and sdk.text_chars and unreadable == 0:
        if observed.raw_terminal == "done":
            return result.passed(
                "upstream SSE comments never reach the client as data; the SDK reads to the end",
                evidence,
            )
    if sdk.ending == "unparsable" or unreadable:
        verdict = "upstream SSE comments reached the client as data lines the SDK cannot parse"
        advice = (
            "a line that starts with a colon is a comment: pass it on as it is (a comment) or "
            "drop it, but never write it out as a data: line."
        )
    elif sdk.ending == "hung":
        verdict = "the stream hung when the upstream sent SSE comments"
        advice = "treat a comment as an event that carries nothing: read on to the next one."
    else:
        verdict = "a stream with upstream SSE comments did not end normally"
        advice = (
            "skip comment lines when you parse the upstream's events, forward the rest, and "
            "end with data: [DONE]."
        )
    return result.failed(verdict, evidence, advice)
