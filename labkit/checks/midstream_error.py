"""``midstream_error``: an upstream failure after the first token reaches the client as an
in-stream error event that the OpenAI SDK raises, and then the stream ends.

Experiment, four streams at once, each failing after six tokens:

- the real ``openai`` SDK against an upstream that sends its in-stream error event;
- the SDK against an upstream that drops the connection (no terminal event at all);
- the SDK against an upstream that ends its body cleanly without ``data: [DONE]`` (a whole
  HTTP response, the connection sound, the terminal event missing: the mock's ``end_after``).
  The SDK itself takes that for a short, finished answer; only the proxy, which knows the
  stream must end with ``[DONE]``, can tell the client it failed;
- a raw capture of the dropped case, to see that the proxy then ends the stream, and that its
  last frame is whole (ends with a blank line: a frame cut short is dropped by every SSE
  client, so an error event without its blank line is never seen).

Pass: all three SDK streams yield some text and then raise ``openai.APIError`` itself, not a
connection error (``APIConnectionError``: the proxy let the failure kill the connection) or a
status error; none gets stuck; and the raw stream ends right after a whole error event. The
bound is generous (LIMIT_S, 5 s at one CPU and stretched below it with the run's ``Budget``, for
a failure the proxy sees within milliseconds). ``observe`` reads the four streams, ``judge``
decides (tested in process: tests/checks/test_judges_midstream_error.py and
test_midstream_error_verdicts.py).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.sdk_stream import SdkStream, read_with_sdk

ID = "midstream_error"
STEP = "06_midstream_errors"
SUMMARY = "a failure after the first token becomes an in-stream error event"
BUDGET_S = 10.0  # a stream that hangs is given up after LIMIT_S, beside three others
MOCK_ONLY = "needs fault injection, which only the mock does (an error after the first token)"
FRAME_SEED, DROP_SEED, RAW_SEED, END_SEED = 4501, 4502, 4503, 4504
FRAME = {"ttft_ms": 100, "tps": 50, "tokens": 40, "error_after": 6}
DROP = {"ttft_ms": 100, "tps": 50, "tokens": 40, "drop_after": 6}
END = {"ttft_ms": 100, "tps": 50, "tokens": 40, "end_after": 6}
LIMIT_S = 5.0  # a stream still open after this (stretched) is stuck

result = Outcome(ID, STEP)

ADVICE = (
    "catch the upstream failure inside the body generator (httpx errors, or a stream that "
    'ends without data: [DONE]), yield data: {"error": {"message": ..., "type": ...}} '
    "and return; forward the upstream's own error event and stop."
)
UNFINISHED_ADVICE = (
    "when the upstream's lines run out before data: [DONE], the stream failed: read_events "
    "must put an UpstreamFailed on the queue after its loop, so that the body sends an error "
    "event and ends."
)
FRAME_ADVICE = (
    "an SSE event ends at a blank line: error_event must return data: {...} followed by two "
    "newlines, or every client drops the event."
)
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def unfinished_frame(body: bytes) -> bool:
    """Whether the body ends inside a frame: something after its last blank line, which an SSE
    client discards at the end of the stream as an event that never ended."""
    return bool(_EVENT_END.split(body)[-1].strip())


def _verdict(frame: SdkStream, drop: SdkStream, end: SdkStream) -> tuple[str, str]:
    """The verdict and advice for a failed run: the first of the three cases that went wrong."""
    endings = {frame.ending, drop.ending, end.ending}
    if frame.ending == drop.ending == "error_event" != end.ending:
        if end.ending == "hung":
            return (
                "the stream hung when the upstream's body ended without data: [DONE]",
                UNFINISHED_ADVICE,
            )
        if end.ending == "finished":
            return (
                "an upstream body that ended without data: [DONE] reached the client as a "
                "finished answer: the failure was hidden",
                UNFINISHED_ADVICE,
            )
    if "hung" in endings:
        return "the stream hung after the upstream failed", ADVICE
    if "connection" in endings:
        return "the connection broke instead of carrying an error event", ADVICE
    if "status" in endings:
        return (
            "the proxy answered with an error status instead of streaming the text it had",
            ADVICE,
        )
    if "finished" in endings:
        return "the stream ended as if it had succeeded: the failure was hidden", ADVICE
    if not (frame.text_chars and drop.text_chars and end.text_chars):
        return "the error arrived but the text before it was lost", ADVICE
    return "the stream stayed open after the error event", ADVICE


@dataclass(frozen=True)
class Observed:
    """How the SDK read the three failing streams (error event, dropped connection, body ended
    without ``[DONE]``), and what a raw capture of another dropped one showed: how it ended, the
    transport error if the connection broke, its body, and when it ended (seconds)."""

    frame: SdkStream
    drop: SdkStream
    end: SdkStream
    raw_terminal: str
    raw_transport_error: str | None
    raw_body: bytes
    raw_total_time: float


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)
    frame, drop, end, raw = await asyncio.gather(
        read_with_sdk(ctx, FRAME, FRAME_SEED, limit),
        read_with_sdk(ctx, DROP, DROP_SEED, limit),
        read_with_sdk(ctx, END, END_SEED, limit),
        acapture_stream(ctx.chat_url, json=chat_body(RAW_SEED, DROP), timeout=limit),
    )
    return Observed(frame, drop, end, raw.terminal, raw.transport_error, raw.body, raw.total_time)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: all three SDK streams carried text and then raised for an error event, and the raw
    stream ended right after a whole error event. A last frame cut short is named first. (A
    stream ``observe`` gave up on is ``hung`` already: ``budget`` moves nothing here.)"""
    frame, drop, end = observed.frame, observed.drop, observed.end
    raw_ended = observed.raw_terminal == "error" and observed.raw_transport_error is None
    cut_short = unfinished_frame(observed.raw_body)
    evidence = {
        "error_event_sdk_ending": frame.ending,
        "error_event_text_chars": frame.text_chars,
        "dropped_sdk_ending": drop.ending,
        "dropped_text_chars": drop.text_chars,
        "ended_sdk_ending": end.ending,
        "ended_text_chars": end.text_chars,
        "dropped_raw_terminal": observed.raw_terminal,
        "dropped_raw_last_frame_whole": not cut_short,
        "dropped_raw_ended_ms": round(observed.raw_total_time * 1000),
    }
    streams = (frame, drop, end)
    if cut_short and observed.raw_transport_error is None:
        return result.failed(
            "the stream's last frame never ended: without a blank line after it, the error "
            "event is dropped by every client",
            evidence,
            FRAME_ADVICE,
        )
    if all(s.ending == "error_event" and s.text_chars for s in streams) and raw_ended:
        return result.passed(
            "an upstream failure mid-stream reaches the client as an error event, then the "
            "stream ends",
            evidence,
        )
    verdict, advice = _verdict(frame, drop, end)
    return result.failed(verdict, evidence, advice)
