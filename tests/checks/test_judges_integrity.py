"""``integrity`` judges what it saw, in process: ``compare`` on equal, lost, repeated,
reordered and replaced sequences of content events, and the judge's every verdict and its
evidence. Nothing is timed, so there is no limit to approach. (The experiment runs over real
sockets in the grader's mutation table: ``lossy_next_item`` leaves its read of the queue running
when the heartbeat timer fires, and loses an event per heartbeat.)"""

from __future__ import annotations

import pytest

from labkit.checks.integrity import SILENCE_S, Difference, Observed, compare, judge
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ONE_CPU = Budget(cpus=1.0)

SENT = tuple(f" word{i}" for i in range(8))
LOST = "the client lost events the upstream sent"
EXTRA = "the client got events the upstream did not send, or got some twice"
MOVED = "the client got the upstream's events out of order"


def without(events: tuple[str, ...], *indexes: int) -> tuple[str, ...]:
    return tuple(e for i, e in enumerate(events) if i not in indexes)


def seen(
    received: tuple[str, ...],
    sent: tuple[str, ...] | None = SENT,
    *,
    status: int | None = 200,
    terminal: str = "done",
) -> Observed:
    return Observed(status, terminal, received, sent)


# compare -----------------------------------------------------------------------------------------


def test_compare_finds_no_difference_between_equal_streams() -> None:
    difference = compare(SENT, SENT)
    assert difference == Difference(0, 0, 0, None)
    assert difference.same


def test_compare_finds_no_difference_between_two_empty_streams() -> None:
    assert compare((), ()).same


def test_compare_counts_a_lost_event_and_where_it_was() -> None:
    assert compare(SENT, without(SENT, 2)) == Difference(lost=1, first_at=2)


def test_compare_counts_one_lost_event_per_heartbeat() -> None:
    difference = compare(SENT, without(SENT, 1, 4, 6))
    assert difference == Difference(lost=3, first_at=1)
    assert not difference.same


def test_compare_counts_every_event_of_an_empty_stream_as_lost() -> None:
    assert compare(SENT, ()) == Difference(lost=len(SENT), first_at=0)


def test_compare_counts_a_repeated_event_as_extra() -> None:
    repeated = (*SENT[:3], SENT[2], *SENT[3:])
    difference = compare(SENT, repeated)
    assert (difference.lost, difference.extra, difference.moved) == (0, 1, 0)
    assert difference.first_at in (2, 3)  # the copy may be matched on either side


def test_compare_counts_two_swapped_events_as_one_moved_not_lost_and_extra() -> None:
    swapped = (*SENT[:2], SENT[3], SENT[2], *SENT[4:])
    assert compare(SENT, swapped) == Difference(moved=1, first_at=2)


def test_compare_counts_the_first_event_sent_last_as_moved() -> None:
    assert compare(SENT, (*SENT[1:], SENT[0])) == Difference(moved=1, first_at=0)


def test_compare_counts_a_replaced_event_as_lost_and_extra() -> None:
    replaced = (*SENT[:2], " other", *SENT[3:])
    assert compare(SENT, replaced) == Difference(lost=1, extra=1, first_at=2)


def test_compare_keeps_repeated_words_apart_by_their_place() -> None:
    sent = (" the", " cat", " and", " the", " dog")
    assert compare(sent, (" the", " cat", " and", " dog")) == Difference(lost=1, first_at=3)


# judge -------------------------------------------------------------------------------------------


def test_the_same_events_in_order_pass_with_their_evidence() -> None:
    result = judge(seen(SENT), ONE_CPU)
    assert result.passed
    assert result.verdict == "the client got every event the upstream sent, once and in order"
    assert result.hint == "see 07_heartbeats_and_timeouts"
    assert dict(result.evidence) == {
        "terminal": "done",
        "upstream_events": len(SENT),
        "client_events": len(SENT),
        "events_lost": 0,
        "events_extra": 0,
        "events_moved": 0,
        "first_difference_at_event": None,
        "upstream_silence_ms": round(SILENCE_S * 1000),
    }


def test_lost_events_fail_and_name_the_read_left_running() -> None:
    result = judge(seen(without(SENT, 3, 5)), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == LOST
    assert result.evidence["events_lost"] == 2
    assert result.evidence["client_events"] == len(SENT) - 2
    assert result.evidence["first_difference_at_event"] == 3
    assert result.hint.startswith("07_heartbeats_and_timeouts: never leave a read of the queue")
    assert "asyncio.timeout" in result.hint


def test_one_lost_event_is_enough_to_fail() -> None:
    assert judge(seen(without(SENT, 7)), ONE_CPU).verdict == LOST


def test_a_repeated_event_fails_as_extra() -> None:
    result = judge(seen((*SENT, SENT[-1])), ONE_CPU)
    assert result.verdict == EXTRA
    assert result.evidence["events_extra"] == 1
    assert result.hint.endswith("send each upstream event once, as it came.")


def test_an_event_made_up_by_the_proxy_fails_as_extra() -> None:
    assert judge(seen((*SENT[:4], " [heartbeat]", *SENT[4:])), ONE_CPU).verdict == EXTRA


def test_reordered_events_fail_as_out_of_order() -> None:
    result = judge(seen((SENT[1], SENT[0], *SENT[2:])), ONE_CPU)
    assert result.verdict == MOVED
    assert result.evidence["events_moved"] == 1
    assert result.evidence["events_lost"] == 0
    assert result.hint.endswith("in the order the reader put them there.")


def test_a_lost_event_is_named_before_an_extra_one() -> None:
    result = judge(seen((*SENT[:2], " other", *SENT[3:])), ONE_CPU)
    assert result.verdict == LOST
    assert (result.evidence["events_lost"], result.evidence["events_extra"]) == (1, 1)


@pytest.mark.parametrize(
    "observed",
    [
        seen(SENT, terminal="truncated"),
        seen(SENT, terminal="error"),
        seen(SENT, status=502),
        seen(SENT[:3], status=None, terminal="truncated"),
    ],
    ids=["truncated", "error", "status", "no-status"],
)
def test_a_stream_that_did_not_reach_its_end_fails_before_any_comparison(
    observed: Observed,
) -> None:
    result = judge(observed, ONE_CPU)
    assert result.verdict == "the stream did not reach its end, so its text could not be compared"
    assert result.hint.startswith("07_heartbeats_and_timeouts: keep the stream open")


def test_a_request_that_never_reached_the_upstream_fails_with_its_status() -> None:
    result = judge(seen((), None, status=404, terminal="error"), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert dict(result.evidence) == {"status": 404}
    assert result.hint.startswith("02_forwarding_proxy:")


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        judge(seen(SENT), ONE_CPU),
        judge(seen(without(SENT, 1)), ONE_CPU),
        judge(seen((*SENT, SENT[0])), ONE_CPU),
        judge(seen((SENT[1], SENT[0], *SENT[2:])), ONE_CPU),
        judge(seen(SENT, terminal="truncated"), ONE_CPU),
        judge(seen((), None), ONE_CPU),
        judge(seen(without(WITH_LINE_ENDS, 1, 3, 5), WITH_LINE_ENDS), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict


# events lost where aiter_lines cut their line ----------------------------------------------------

WITH_LINE_ENDS = ("...", "\u2028", "...", "\u2029", "...", "\x85", "...", " word")


def test_losing_the_events_that_hold_unicode_line_ends_says_how_lines_are_split() -> None:
    verdict = judge(seen(without(WITH_LINE_ENDS, 1, 3, 5), WITH_LINE_ENDS), ONE_CPU)
    assert not verdict.passed
    assert verdict.verdict == (
        "the client lost the events whose text holds a Unicode line or paragraph separator: "
        "their data lines were cut in two"
    )
    assert "U+2028, U+2029 and U+0085" in verdict.hint
    assert "sse_lines" in verdict.hint and "aiter_lines" in verdict.hint


def test_losing_other_events_keeps_the_heartbeat_advice() -> None:
    verdict = judge(seen(without(WITH_LINE_ENDS, 7), WITH_LINE_ENDS), ONE_CPU)
    assert verdict.verdict == LOST
    assert "queue.get()" in verdict.hint


def test_every_event_arriving_passes_with_line_ends_in_them() -> None:
    assert judge(seen(WITH_LINE_ENDS, WITH_LINE_ENDS), ONE_CPU).passed
