"""``passthrough`` judges how the SDK read a stream full of upstream comments and what a raw
capture of another showed, in process: every verdict, and one unreadable data event is enough
to fail. (The experiment runs over real sockets in the grader's mutation table:
``comments_as_data``.)"""

from __future__ import annotations

from labkit.checks.machine import Budget
from labkit.checks.passthrough import COMMENT_EVERY_MS, Observed, judge
from labkit.checks.sdk_stream import Ending, SdkStream

ONE_CPU = Budget(cpus=1.0)


def seen(
    ending: Ending = "finished",
    text: int = 120,
    raw_terminal: str = "done",
    unreadable: int = 0,
    error: str = "",
) -> Observed:
    return Observed(SdkStream(ending, text, 21, error), raw_terminal, unreadable, 14)


def test_a_stream_read_to_its_end_with_no_unreadable_event_passes() -> None:
    result = judge(seen(), ONE_CPU)
    assert result.passed
    assert result.verdict == (
        "upstream SSE comments never reach the client as data; the SDK reads to the end"
    )
    assert dict(result.evidence) == {
        "sdk_ending": "finished",
        "sdk_text_chars": 120,
        "sdk_error": None,
        "raw_terminal": "done",
        "raw_unreadable_data_events": 0,
        "raw_comments": 14,
        "upstream_comment_every_ms": COMMENT_EVERY_MS,
    }


def test_one_unreadable_data_event_fails_even_when_the_sdk_finished() -> None:
    result = judge(seen(unreadable=1), ONE_CPU)
    assert result.verdict == (
        "upstream SSE comments reached the client as data lines the SDK cannot parse"
    )
    assert "never write it out as a data: line" in result.hint


def test_an_sdk_that_could_not_parse_the_stream_fails_the_same_way() -> None:
    result = judge(
        seen("unparsable", text=0, raw_terminal="truncated", error="JSONDecodeError"), ONE_CPU
    )
    assert result.verdict.startswith("upstream SSE comments reached the client as data lines")
    assert result.evidence["sdk_error"] == "JSONDecodeError"


def test_a_stream_that_hung_on_comments_is_named() -> None:
    result = judge(seen("hung", text=0), ONE_CPU)
    assert result.verdict == "the stream hung when the upstream sent SSE comments"
    assert result.hint.endswith("read on to the next one.")


def test_a_stream_that_ended_badly_otherwise_is_named() -> None:
    for observed in (seen(raw_terminal="truncated"), seen(text=0), seen("connection", text=0)):
        result = judge(observed, ONE_CPU)
        assert result.verdict == "a stream with upstream SSE comments did not end normally"
