"""``midstream_error`` judges the three SDK streams and the raw capture, in process: a pass, a
last frame cut short (named before anything else, unless the connection broke), a raw stream
that stayed open, and every other verdict. (test_midstream_error_verdicts.py has the cases of a
body that ended without ``[DONE]``; the experiment runs over real sockets in the grader's
mutation table.)"""

from __future__ import annotations

import pytest

from labkit.checks.machine import Budget
from labkit.checks.midstream_error import ADVICE, FRAME_ADVICE, Observed, judge
from labkit.checks.sdk_stream import Ending, SdkStream

ONE_CPU = Budget(cpus=1.0)

ERROR = b'data: {"error": {"message": "the upstream stream failed", "type": "upstream_error"}}'
WHOLE = b'data: {"choices": []}\n\n' + ERROR + b"\n\n"


def sdk(ending: Ending = "error_event", text: int = 30) -> SdkStream:
    return SdkStream(ending, text, 7, "")


def seen(
    frame: SdkStream | None = None,
    drop: SdkStream | None = None,
    end: SdkStream | None = None,
    *,
    terminal: str = "error",
    transport_error: str | None = None,
    body: bytes = WHOLE,
) -> Observed:
    return Observed(
        frame or sdk(), drop or sdk(), end or sdk(), terminal, transport_error, body, 0.2184
    )


def test_three_error_events_after_text_and_a_whole_last_frame_pass() -> None:
    result = judge(seen(), ONE_CPU)
    assert result.passed
    assert result.verdict == (
        "an upstream failure mid-stream reaches the client as an error event, then the stream ends"
    )
    assert dict(result.evidence) == {
        "error_event_sdk_ending": "error_event",
        "error_event_text_chars": 30,
        "dropped_sdk_ending": "error_event",
        "dropped_text_chars": 30,
        "ended_sdk_ending": "error_event",
        "ended_text_chars": 30,
        "dropped_raw_terminal": "error",
        "dropped_raw_last_frame_whole": True,
        "dropped_raw_ended_ms": 218,
    }


def test_a_last_frame_cut_short_is_named_before_anything_else() -> None:
    result = judge(seen(drop=sdk("hung"), terminal="truncated", body=WHOLE[:-1]), ONE_CPU)
    assert result.verdict.startswith("the stream's last frame never ended")
    assert result.hint == f"06_midstream_errors: {FRAME_ADVICE}"
    assert result.evidence["dropped_raw_last_frame_whole"] is False


def test_a_frame_cut_by_a_broken_connection_is_judged_as_a_broken_connection() -> None:
    result = judge(
        seen(
            drop=sdk("connection"),
            terminal="truncated",
            transport_error="RemoteProtocolError",
            body=WHOLE[:-1],
        ),
        ONE_CPU,
    )
    assert result.verdict == "the connection broke instead of carrying an error event"


def test_a_raw_stream_that_stayed_open_after_the_error_fails() -> None:
    for observed in (seen(terminal="truncated"), seen(transport_error="ReadTimeout")):
        result = judge(observed, ONE_CPU)
        assert result.verdict == "the stream stayed open after the error event"
        assert result.hint == f"06_midstream_errors: {ADVICE}"


@pytest.mark.parametrize(
    ("drop", "verdict"),
    [
        (sdk("hung"), "the stream hung after the upstream failed"),
        (sdk("connection"), "the connection broke instead of carrying an error event"),
        (
            sdk("status", 0),
            "the proxy answered with an error status instead of streaming the text it had",
        ),
        (sdk("finished"), "the stream ended as if it had succeeded: the failure was hidden"),
        (sdk("error_event", 0), "the error arrived but the text before it was lost"),
    ],
)
def test_every_way_a_failing_stream_goes_wrong_is_named(drop: SdkStream, verdict: str) -> None:
    assert judge(seen(drop=drop), ONE_CPU).verdict == verdict
