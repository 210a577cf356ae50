"""``replay_bound`` judges what it saw, in process: an old cursor refused (by status, or by an
error event with no content) or replayed, a recent one answered with the events after it or
not, and every verdict. Nothing is timed. (The experiment runs over real sockets in the
grader's mutation table: ``unbounded_log`` replays from the old cursor; ``replay_from_start``
cannot give the recent one, its first events being gone.)"""

from __future__ import annotations

import pytest

from labkit.checks.machine import Budget
from labkit.checks.replay_bound import BOUND, OLD_CURSOR, RECENT_BACK, Observed, Resumed, judge
from labkit.checks.result import CheckResult

ONE_CPU = Budget(cpus=1.0)

FIRST = (*(f'{{"n": {n}}}' for n in range(1, 90)), "[DONE]")
CURSOR = len(FIRST) - RECENT_BACK
REFUSED = Resumed(OLD_CURSOR, 404, (), 0, "error")
RECENT = Resumed(CURSOR, 200, FIRST[CURSOR:], RECENT_BACK - 1, "done")
PASSED = "a cursor older than the log keeps is refused, and a recent one resumes"
REPLAYED = "the proxy replayed events from a cursor older than its log may keep"
NOT_REFUSED = "the proxy did not refuse a cursor older than its log may keep"
NOT_RECENT = "a resume from a recent cursor did not give the events after it"


def seen(
    old: Resumed | None = REFUSED,
    recent: Resumed | None = RECENT,
    *,
    stream: str | None = "s-1",
    reached: bool = True,
) -> Observed:
    return Observed(reached, stream, FIRST, "done" if old else "truncated", old, recent)


def test_an_old_cursor_refused_and_a_recent_one_resumed_pass_with_their_evidence() -> None:
    result = judge(seen(), ONE_CPU)
    assert (result.passed, result.verdict) == (True, PASSED)
    assert result.hint == "see 15_resumable_streams"
    assert dict(result.evidence) == {
        "replay_events": BOUND,
        "answer_events": len(FIRST),
        "first_terminal": "done",
        "old_cursor": OLD_CURSOR,
        "old_status": 404,
        "old_content_events": 0,
        "recent_cursor": CURSOR,
        "recent_status": 200,
        "recent_events": RECENT_BACK,
        "recent_terminal": "done",
    }


@pytest.mark.parametrize("status", [404, 410, 400, 503, None])
def test_an_old_cursor_refused_with_any_error_status_passes(status: int | None) -> None:
    assert judge(seen(Resumed(OLD_CURSOR, status, (), 0, "error")), ONE_CPU).passed


def test_an_old_cursor_refused_by_an_error_event_and_no_content_passes() -> None:
    in_stream = Resumed(OLD_CURSOR, 200, ('{"error": {"message": "gone"}}',), 0, "error")
    assert judge(seen(in_stream), ONE_CPU).passed


def test_an_old_cursor_replayed_fails_however_the_replay_ends() -> None:
    for terminal in ("done", "error", "disconnected"):
        replay = Resumed(OLD_CURSOR, 200, FIRST[OLD_CURSOR:], 1, terminal)
        result = judge(seen(replay), ONE_CPU)
        assert result.verdict == REPLAYED, terminal
        assert result.hint.startswith("15_resumable_streams: bound the replay log")


def test_an_old_cursor_neither_refused_nor_replayed_fails() -> None:
    heartbeats_only = Resumed(OLD_CURSOR, 200, (), 0, "disconnected")
    assert judge(seen(heartbeats_only), ONE_CPU).verdict == NOT_REFUSED


@pytest.mark.parametrize(
    "recent",
    [
        Resumed(CURSOR, 404, (), 0, "error"),  # forgot more than the bound says
        Resumed(CURSOR, 200, ('{"error": {"message": "not kept"}}',), 0, "error"),  # from 0
        Resumed(CURSOR, 200, FIRST[CURSOR - 1 :], RECENT_BACK, "done"),  # one event early
        Resumed(CURSOR, 200, FIRST[CURSOR:-1], RECENT_BACK - 1, "disconnected"),  # no end
    ],
    ids=["refused", "from-the-start", "off-by-one", "no-end"],
)
def test_a_recent_cursor_not_resumed_exactly_fails(recent: Resumed) -> None:
    result = judge(seen(recent=recent), ONE_CPU)
    assert result.verdict == NOT_RECENT
    assert result.hint.startswith("15_resumable_streams: answer GET /v1/streams/{id}")


def test_no_stream_id_an_unended_stream_and_an_unreached_upstream_fail_first() -> None:
    assert judge(seen(stream=None), ONE_CPU).verdict == (
        "the response had no X-Stream-Id header, so the stream could not be resumed"
    )
    assert judge(seen(None, None), ONE_CPU).verdict == "the resumable stream did not reach its end"
    assert judge(seen(reached=False), ONE_CPU).verdict == "the request never reached the upstream"


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        judge(seen(), ONE_CPU),
        judge(seen(Resumed(OLD_CURSOR, 200, FIRST, 3, "done")), ONE_CPU),
        judge(seen(Resumed(OLD_CURSOR, 200, (), 0, "disconnected")), ONE_CPU),
        judge(seen(recent=Resumed(CURSOR, 404, (), 0, "error")), ONE_CPU),
        judge(seen(stream=None), ONE_CPU),
        judge(seen(None, None), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
