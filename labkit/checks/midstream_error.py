"""``midstream_error``: an upstream failure after the first token reaches the client as an
in-stream error event that the OpenAI SDK raises, and then the stream ends.

Experiment, three streams at once, each failing after six tokens:

- the real ``openai`` SDK against an upstream that sends its in-stream error event;
- the SDK against an upstream that drops the connection (no terminal event at all);
- a raw capture of the second case, to see that the proxy then ends the stream.

Pass: both SDK streams yield some text and then raise ``openai.APIError`` itself, not a
connection error (``APIConnectionError``: the proxy let the failure kill the connection) or a
status error; neither gets stuck; and the raw stream ends right after an error event. The
bound is generous (5 s for a failure the proxy sees within milliseconds).
"""

from __future__ import annotations

import asyncio

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body
from labkit.checks.result import CheckResult
from labkit.checks.sdk_stream import read_with_sdk

ID = "midstream_error"
STEP = "06_midstream_errors"
FRAME_SEED, DROP_SEED, RAW_SEED = 4501, 4502, 4503
FRAME = {"ttft_ms": 100, "tps": 50, "tokens": 40, "error_after": 6}
DROP = {"ttft_ms": 100, "tps": 50, "tokens": 40, "drop_after": 6}
LIMIT_S = 5.0

result = Outcome(ID, STEP)

ADVICE = (
    "catch the upstream failure inside the body generator (httpx errors, or a stream that "
    'ends without data: [DONE]), yield data: {"error": {"message": ..., "type": ...}} '
    "and return; forward the upstream's own error event and stop."
)


async def check_midstream_error(ctx: CheckContext) -> CheckResult:
    frame, drop, raw = await asyncio.gather(
        read_with_sdk(ctx, FRAME, FRAME_SEED, LIMIT_S),
        read_with_sdk(ctx, DROP, DROP_SEED, LIMIT_S),
        acapture_stream(ctx.chat_url, json=chat_body(RAW_SEED, DROP), timeout=LIMIT_S),
    )
    raw_ended = raw.terminal == "error" and raw.transport_error is None
    evidence = {
        "error_event_sdk_ending": frame.ending,
        "error_event_text_chars": frame.text_chars,
        "dropped_sdk_ending": drop.ending,
        "dropped_text_chars": drop.text_chars,
        "dropped_raw_terminal": raw.terminal,
        "dropped_raw_ended_ms": round(raw.total_time * 1000),
    }
    endings = {frame.ending, drop.ending}
    if endings == {"error_event"} and frame.text_chars and drop.text_chars and raw_ended:
        return result.passed(
            "an upstream failure mid-stream reaches the client as an error event, then the "
            "stream ends",
            evidence,
        )
    if "hung" in endings:
        verdict = "the stream hung after the upstream failed"
    elif "connection" in endings:
        verdict = "the connection broke instead of carrying an error event"
    elif "status" in endings:
        verdict = "the proxy answered with an error status instead of streaming the text it had"
    elif "finished" in endings:
        verdict = "the stream ended as if it had succeeded: the failure was hidden"
    elif not (frame.text_chars and drop.text_chars):
        verdict = "the error arrived but the text before it was lost"
    else:
        verdict = "the stream stayed open after the error event"
    return result.failed(verdict, evidence, ADVICE)
