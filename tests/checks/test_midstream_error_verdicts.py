"""``midstream_error`` decides from what it saw, in words a learner can act on: a frame cut short
is named as such (not as a hidden failure), and a body that ended without ``[DONE]`` is named
apart from the other failures. (The experiments themselves run over real sockets in the grader's
mutation table, ``test_grading_mutants.py``: ``unended_error_frame``, ``unfinished_read``.)"""

from __future__ import annotations

import pytest

from labkit.checks.midstream_error import _verdict, unfinished_frame
from labkit.checks.sdk_stream import Ending, SdkStream

ERROR = b'data: {"error": {"message": "the upstream stream failed", "type": "upstream_error"}}'


@pytest.mark.parametrize(
    ("body", "cut_short"),
    [
        (b"data: {}\n\n" + ERROR + b"\n\n", False),
        (b"data: {}\r\n\r\n" + ERROR + b"\r\n\r\n", False),
        (b"data: {}\n\n: keep-alive\n\n", False),
        (b"", False),
        (b"data: {}\n\n" + ERROR + b"\n", True),  # one newline: the event never ended
        (b"data: {}\n\n" + ERROR, True),
    ],
)
def test_a_body_that_ends_inside_a_frame_is_seen(body: bytes, cut_short: bool) -> None:
    assert unfinished_frame(body) is cut_short


def sdk(ending: Ending, text: int = 30) -> SdkStream:
    return SdkStream(ending, text, 5, "")


def test_a_body_that_ended_without_done_and_hangs_is_named() -> None:
    verdict, advice = _verdict(sdk("error_event"), sdk("error_event"), sdk("hung"))
    assert verdict == "the stream hung when the upstream's body ended without data: [DONE]"
    assert "UpstreamFailed" in advice


def test_a_body_that_ended_without_done_passed_on_as_finished_is_named() -> None:
    verdict, _ = _verdict(sdk("error_event"), sdk("error_event"), sdk("finished"))
    assert verdict.startswith("an upstream body that ended without data: [DONE] reached")


def test_a_dropped_connection_that_hangs_keeps_the_general_verdict() -> None:
    verdict, _ = _verdict(sdk("error_event"), sdk("hung"), sdk("hung"))
    assert verdict == "the stream hung after the upstream failed"
