"""``keepalive`` judges what the client saw, in process: a comment just inside and just outside
the latest point of the silence, a client gap just above and below the share that says the stream
was held back, and every other verdict. (The experiment runs over real sockets in
test_keepalive_hidden_silence.py and the grader's mutation table.)"""

from __future__ import annotations

from dataclasses import replace

from labkit.checks.keepalive import (
    GRADER_PAUSE_S,
    HIDDEN_SHARE,
    LATEST_IN_GAP,
    STALL_S,
    Observed,
    judge,
)
from labkit.checks.machine import Budget

ONE_CPU = Budget(cpus=1.0)

LITTLE = 0.01
SILENT_FROM = 0.3  # the third token; the upstream is then silent for STALL_S


def seen(
    comments: tuple[float, ...] = (),
    gap: float = STALL_S,
    *,
    status: int | None = 200,
    terminal: str = "done",
    reached: bool = True,
) -> Observed:
    """Three tokens, a silence of ``gap`` seconds as the client saw it, three more."""
    tokens = (0.2, 0.25, SILENT_FROM, SILENT_FROM + gap, SILENT_FROM + gap + 0.05)
    return Observed(status, terminal, tokens, comments, reached)


def at_share(share: float, gap: float = STALL_S) -> float:
    return SILENT_FROM + share * gap


def test_a_comment_half_way_through_the_silence_passes_with_its_evidence() -> None:
    result = judge(seen((at_share(0.45), at_share(0.9))), ONE_CPU)
    assert result.passed
    assert result.verdict == "the proxy sends SSE comments while the upstream is silent"
    assert dict(result.evidence) == {
        "terminal": "done",
        "upstream_silence_ms": round(STALL_S * 1000),
        "client_silence_ms": round(STALL_S * 1000),
        "comments_during_silence": 1,
        "first_comment_after_ms": round(0.45 * STALL_S * 1000),
        "comments_total": 2,
    }


def test_a_comment_just_inside_the_latest_point_passes_and_just_outside_fails() -> None:
    inside = judge(seen((at_share(LATEST_IN_GAP) - LITTLE,)), ONE_CPU)
    outside = judge(seen((at_share(LATEST_IN_GAP) + LITTLE,)), ONE_CPU)
    assert inside.passed
    assert not outside.passed
    assert outside.verdict == "no SSE comment arrived while the upstream was silent"
    assert "keep-alive" in outside.hint


def test_a_comment_with_the_token_that_starts_the_silence_does_not_count() -> None:
    assert not judge(seen((SILENT_FROM,)), ONE_CPU).passed
    assert judge(seen((SILENT_FROM + LITTLE,)), ONE_CPU).passed


def test_a_client_gap_just_under_the_hidden_share_means_the_stream_was_held_back() -> None:
    held_back = judge(seen(gap=HIDDEN_SHARE * STALL_S - LITTLE), ONE_CPU)
    seen_silence = judge(seen(gap=HIDDEN_SHARE * STALL_S + LITTLE), ONE_CPU)
    assert held_back.verdict.startswith(
        "no SSE comment arrived, and the client never saw the upstream's silence"
    )
    assert "trickle reports the holding back" in held_back.hint
    assert seen_silence.verdict == "no SSE comment arrived while the upstream was silent"


def test_a_stream_with_no_gap_at_all_was_held_back() -> None:
    result = judge(Observed(200, "done", (4.9,), (), True), ONE_CPU)
    assert result.verdict.startswith("no SSE comment arrived, and the client never saw")
    assert result.evidence["client_silence_ms"] is None


def test_a_stream_that_did_not_end_with_done_did_not_survive_even_with_comments() -> None:
    for broken in (seen((at_share(0.45),), terminal="truncated"), seen(status=502)):
        result = judge(broken, ONE_CPU)
        assert result.verdict == "the stream did not survive the upstream's silence"
        assert result.hint.startswith("07_heartbeats_and_timeouts: keep the stream open")


def test_a_request_that_never_reached_the_upstream_fails_with_its_status() -> None:
    result = judge(seen(status=404, reached=False), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert dict(result.evidence) == {"status": 404}
    assert result.hint.startswith("02_forwarding_proxy:")


def test_late_comments_while_the_grader_paused_are_inconclusive_and_without_a_pause_fail() -> None:
    late = seen((at_share(0.95), at_share(0.99)))
    paused = judge(replace(late, grader_pause_s=GRADER_PAUSE_S + LITTLE), ONE_CPU)
    unpaused = judge(replace(late, grader_pause_s=GRADER_PAUSE_S - LITTLE), ONE_CPU)
    assert paused.inconclusive
    assert paused.verdict == "inconclusive: the grader paused while it timed the heartbeats"
    assert paused.evidence["late_comment_after_ms"] == round(0.95 * STALL_S * 1000)
    assert not unpaused.passed and not unpaused.skipped
    assert unpaused.evidence["grader_pause_ms"] == round((GRADER_PAUSE_S - LITTLE) * 1000)
    assert unpaused.verdict == "no SSE comment arrived while the upstream was silent"


def test_a_proxy_that_sent_no_comment_fails_however_long_the_grader_paused() -> None:
    result = judge(replace(seen(), grader_pause_s=3.0), ONE_CPU)
    assert not result.skipped
    assert result.verdict == "no SSE comment arrived while the upstream was silent"
    assert "late_comment_after_ms" not in result.evidence
