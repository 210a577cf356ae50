"""``resume`` and ``resume_twice`` judge what they saw, in process: connections put together
against the upstream's own events, ids missing (none at all, one left out, a whole stream sent
as one event), ids numbered per connection, a resume refused, a stream that ended before the
drop or never reached its end, events lost, repeated or reordered, and every verdict. Nothing
is timed, so there is no limit to approach. (The experiments run over real sockets in the
grader's mutation table: ``no_event_ids``, ``replay_from_start``, ``ids_per_connection``,
``cancel_on_drop``.)"""

from __future__ import annotations

import itertools

import pytest

from labkit.checks import resume_twice
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.resume import Leg, Observed, judge

ONE_CPU = Budget(cpus=1.0)

SENT = tuple(f" word{i}" for i in range(12))
STREAM = "s-1"
PASSED = "the client resumed after a drop and got every event once and in order"
PASSED_TWICE = "the client resumed twice and got every event once and in order"
NO_STREAM = "the response had no X-Stream-Id header, so the stream could not be resumed"
NO_IDS = "events need id: lines: some came without one, so the client could not say where it was"
REFUSED = "the proxy did not resume the stream from the client's last event id"
NOT_DROPPED = "the stream ended before the client dropped it, so nothing was resumed"
RENUMBERED = "the resumed events were not numbered on from the client's last event id"
UNENDED = "the resumed stream did not reach its end"
STOPPED_SHORT = "the stream stopped before the client could drop it"
LOST = "the resumed stream lost events the upstream sent"
REPEATED = "the resumed stream repeated events the client already had"
MOVED = "the resumed stream gave the upstream's events out of order"


def leg(
    texts: tuple[str, ...],
    first: int,
    *,
    terminal: str = "disconnected",
    status: int | None = 200,
    ids: tuple[str | None, ...] | None = None,
) -> Leg:
    """A connection whose events are ``texts``, numbered from ``first`` unless ``ids`` says."""
    numbers = tuple(str(n) for n in range(first, first + len(texts))) if ids is None else ids
    return Leg(status, numbers, texts, terminal)


def dropped_at(*cuts: int, received: tuple[str, ...] = SENT) -> tuple[Leg, ...]:
    """``received`` cut into connections at ``cuts``, numbered 1, 2, 3 ... across them, the
    last one ending with ``[DONE]``."""
    bounds = [0, *cuts, len(received)]
    legs = [leg(received[a:b], a + 1) for a, b in itertools.pairwise(bounds)]
    return (*legs[:-1], leg(legs[-1].received, bounds[-2] + 1, terminal="done"))


def seen(
    legs: tuple[Leg, ...], *, sent: tuple[str, ...] | None = SENT, stream: str | None = STREAM
) -> Observed:
    return Observed(stream, legs, sent, drops=len(legs) - 1 or 1)


def test_one_drop_resumed_with_every_event_passes_with_its_evidence() -> None:
    result = judge(seen(dropped_at(5)), ONE_CPU)
    assert result.passed
    assert (result.id, result.verdict) == ("resume", PASSED)
    assert result.hint == "see 15_resumable_streams"
    assert dict(result.evidence) == {
        "stream_id_header": True,
        "connections": 2,
        "resumes_planned": 1,
        "resume_statuses": "200",
        "events_without_id": 0,
        "ids": "1-5,6-12",
        "terminal": "done",
        "upstream_events": 12,
        "client_events": 12,
        "events_lost": 0,
        "events_extra": 0,
        "events_moved": 0,
        "first_difference_at_event": None,
    }


def test_two_drops_resumed_pass_as_resume_twice() -> None:
    result = resume_twice.judge(seen(dropped_at(4, 8)), ONE_CPU)
    assert (result.id, result.passed, result.verdict) == ("resume_twice", True, PASSED_TWICE)
    assert result.evidence["ids"] == "1-4,5-8,9-12"


def test_a_request_that_never_reached_the_upstream_fails_at_forwarding() -> None:
    result = judge(seen(dropped_at(5), sent=None), ONE_CPU)
    assert result.verdict == "the request never reached the upstream"
    assert result.hint.startswith("02_forwarding_proxy:")


def test_no_stream_id_fails_before_anything_else() -> None:
    result = judge(seen((leg(SENT, 1, terminal="done"),), stream=None), ONE_CPU)
    assert result.verdict == NO_STREAM
    assert result.hint.startswith("15_resumable_streams: answer a request with X-Resumable")


def test_a_first_connection_refused_fails_as_no_stream() -> None:
    assert judge(seen((leg((), 1, status=404, terminal="error"),)), ONE_CPU).verdict == NO_STREAM


@pytest.mark.parametrize(
    "ids",
    [
        (None,) * 5,  # no id: line at all
        ("1", "2", "2", "4", "5"),  # the third came without one: it keeps the second's
        ("1",) * 5,  # the whole answer as one event: the rest are its lines
    ],
    ids=["none", "one-left-out", "one-event"],
)
def test_events_without_an_id_of_their_own_fail_saying_events_need_id_lines(
    ids: tuple[str | None, ...],
) -> None:
    result = judge(seen((leg(SENT[:5], 1, ids=ids),)), ONE_CPU)
    assert result.verdict == NO_IDS
    assert result.evidence["events_without_id"] == sum(
        1 for n, i in enumerate(ids) if i is None or (n and ids[n - 1] == i)
    )
    assert "id: line" in result.hint


def test_a_resumed_connection_without_ids_fails_the_same_way() -> None:
    first, second = dropped_at(5)
    second = leg(second.received, 6, terminal="done", ids=(None,) * len(second.received))
    assert judge(seen((first, second)), ONE_CPU).verdict == NO_IDS


@pytest.mark.parametrize("status", [404, 500, None])
def test_a_resume_refused_fails(status: int | None) -> None:
    first, _ = dropped_at(5)
    result = judge(seen((first, leg((), 6, status=status, terminal="error"))), ONE_CPU)
    assert result.verdict == REFUSED
    assert result.evidence["resume_statuses"] == str(status)


def test_a_stream_that_ended_before_the_drop_resumed_nothing() -> None:
    result = judge(Observed(STREAM, (leg(SENT, 1, terminal="done"),), SENT, drops=1), ONE_CPU)
    assert result.verdict == NOT_DROPPED


def test_a_second_drop_that_never_came_fails_resume_twice() -> None:
    legs = dropped_at(5)
    result = resume_twice.judge(Observed(STREAM, legs, SENT, drops=2), ONE_CPU)
    assert (result.id, result.verdict) == ("resume_twice", NOT_DROPPED)


@pytest.mark.parametrize("terminal", ["disconnected", "truncated", "error"])
def test_a_resumed_stream_that_did_not_reach_its_end_fails(terminal: str) -> None:
    first, second = dropped_at(5)
    second = leg(second.received[:3], 6, terminal=terminal)
    assert judge(seen((first, second)), ONE_CPU).verdict == UNENDED


def test_an_answer_stopped_at_the_drop_leaves_an_empty_resume_and_no_second_drop() -> None:
    first = leg(SENT[:5], 1)
    result = resume_twice.judge(
        Observed(STREAM, (first, leg((), 6, terminal="truncated")), SENT, drops=2), ONE_CPU
    )
    assert (result.id, result.verdict) == ("resume_twice", UNENDED)
    assert "a drop is not a Stop" in result.hint


@pytest.mark.parametrize("terminal", ["truncated", "error", "disconnected"])
def test_a_first_connection_that_stopped_short_was_never_dropped(terminal: str) -> None:
    result = judge(seen((leg(SENT[:2], 1, terminal=terminal),)), ONE_CPU)
    assert result.verdict == STOPPED_SHORT


def test_a_resume_replayed_from_the_start_fails_as_repeated_not_as_renumbered() -> None:
    first = leg(SENT[:5], 1)
    second = leg(SENT, 1, terminal="done")
    result = judge(seen((first, second)), ONE_CPU)
    assert result.verdict == REPEATED
    assert result.evidence["events_extra"] == 5
    assert result.hint.endswith(
        "start a resumed connection after the client's cursor, not at the start."
    )


def test_ids_numbered_per_connection_fail_even_when_the_text_is_whole() -> None:
    first = leg(SENT[:5], 1)
    second = leg(SENT[5:], 1, terminal="done")  # numbered from 1 again
    result = judge(seen((first, second)), ONE_CPU)
    assert result.verdict == RENUMBERED
    assert result.evidence["ids"] == "1-5,1-7"
    assert "never per connection" in result.hint


def test_ids_per_connection_send_the_second_resume_back_and_repeat_events() -> None:
    # second connection numbered 1-4 though it held events 6-9: its cursor 4 brings 5-12 again
    legs = (leg(SENT[:5], 1), leg(SENT[5:9], 1), leg(SENT[4:], 5, terminal="done"))
    result = resume_twice.judge(seen(legs), ONE_CPU)
    assert (result.id, result.verdict) == ("resume_twice", REPEATED)


def test_ids_that_do_not_start_at_one_fail_as_renumbered() -> None:
    first = leg(SENT[:5], 0)
    second = leg(SENT[5:], 5, terminal="done")
    assert judge(seen((first, second)), ONE_CPU).verdict == RENUMBERED


def test_an_event_lost_across_the_drop_fails_as_lost() -> None:
    first = leg(SENT[:5], 1)
    second = leg(SENT[6:], 6, terminal="done")  # event 6 never sent: numbered over it
    result = judge(seen((first, second)), ONE_CPU)
    assert result.verdict == LOST
    assert (result.evidence["events_lost"], result.evidence["first_difference_at_event"]) == (1, 5)


def test_events_out_of_order_fail_as_moved() -> None:
    first = leg(SENT[:5], 1)
    second = leg((SENT[6], SENT[5], *SENT[7:]), 6, terminal="done")
    assert judge(seen((first, second)), ONE_CPU).verdict == MOVED


def test_no_verdict_holds_a_digit() -> None:
    first, second = dropped_at(5)
    results: list[CheckResult] = [
        judge(seen((first, second)), ONE_CPU),
        judge(seen(dropped_at(3, 6)), ONE_CPU),
        judge(seen((first, second), sent=None), ONE_CPU),
        judge(seen((first,), stream=None), ONE_CPU),
        judge(seen((leg(SENT[:5], 1, ids=(None,) * 5),)), ONE_CPU),
        judge(seen((first, leg((), 6, status=404, terminal="error"))), ONE_CPU),
        judge(seen((first, leg(SENT, 1, terminal="done"))), ONE_CPU),
        judge(seen((first, leg(SENT[5:], 1, terminal="done"))), ONE_CPU),
        judge(seen((first, leg(SENT[6:], 6, terminal="done"))), ONE_CPU),
        judge(seen((leg(SENT[:2], 1, terminal="error"),)), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
