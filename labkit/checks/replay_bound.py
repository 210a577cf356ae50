"""``replay_bound``: the replay log keeps a bounded number of events per answer; a resume from
a cursor older than that is refused, one from a recent cursor still works.

A replay log that keeps every event of every answer grows with the answers' length, times the
answers running, for as long as each is kept: the memory a slow reader could not make a bounded
queue hold (``backpressure``) comes back through the log. ``REPLAY_EVENTS`` bounds it; the
price is that a client away for longer than that many events cannot resume, and must be told
so (404 in OpenAI's error shape), never given a stream with a hole in it.

Experiment: the grader starts this check's proxy with ``REPLAY_EVENTS`` = BOUND (20,
``PROXY_ENV``). A resumable stream of TOKENS tokens (about forty events) is read to its end;
then ``GET /v1/streams/{id}`` twice: with ``Last-Event-ID`` = OLD_CURSOR (5, some fifteen
events before what the log may keep), and with the id RECENT_BACK (5) events before the last.
The cursors are places in the answer (event N has ``id: N``), counted by the client.

The first connection is live, but a live reader of a bounded log is cut, rightly, once it falls
BOUND events behind the answer, as a client away that long is. The answer is paced so that
BOUND events take over a second: a grader busy for a tenth of that must not fail a correct
proxy (at 400 tokens a second, BOUND events took 80 ms, and the reference failed a loaded run).

Pass: the old cursor is refused (an error status, or an error event and no content) and the
recent one gives the events after it, as the first connection got them, to ``[DONE]``. An
unbounded log replays from the old cursor; a bounded one that forgets more than it must, or a
resume that starts elsewhere, fails the recent one. Nothing is timed. ``observe`` runs the three
connections; ``judge`` decides (tested in process: tests/checks/test_judges_replay_bound.py).
Each connection is given up after LIMIT_S, stretched with the run's ``Budget``.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.capture import Capture
from labkit.checks.context import CheckContext, Outcome, finished
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult, Evidence
from labkit.checks.resume import NO_STREAM_ID_ADVICE, STEP, open_resumable, resume_from, stream_id

__all__ = ["BOUND", "ID", "Observed", "Resumed", "judge", "observe"]

ID = "replay_bound"
SUMMARY = "the replay log is bounded: an old cursor is refused, a recent one resumes"
MOCK_ONLY = "needs an answer of a known length, which only the mock's pacing gives"
SEED = 7521
BOUND = 20  # REPLAY_EVENTS for this check's proxy
PROXY_ENV = {"REPLAY_EVENTS": str(BOUND)}
TOKENS = 60  # about forty events: the mock puts more than one token in some
SCENARIO = {"ttft_ms": 50, "tps": 25, "tokens": TOKENS}  # BOUND events: about 1.2 s
OLD_CURSOR = 5
RECENT_BACK = 5
LIMIT_S = 6.0
BUDGET_S = 20.0

BOUND_ADVICE = (
    "bound the replay log at REPLAY_EVENTS events per answer (the oldest dropped first), and "
    "answer a cursor older than what it keeps with a 404, never a replay."
)
RECENT_ADVICE = (
    "answer GET /v1/streams/{id} with Last-Event-ID: N with every kept event after N, each "
    "with its id, to the end of the answer."
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Resumed:
    """One resume as the client saw it: the cursor sent, the status, each event's data, how
    many were content events, and how it ended."""

    cursor: int
    status: int | None
    data: tuple[str, ...]
    content_events: int
    terminal: str

    @classmethod
    def of(cls, cursor: int, capture: Capture) -> Resumed:
        data = tuple(e.data for e in capture.events)
        return cls(cursor, capture.status, data, capture.content_events, capture.terminal)

    @property
    def refused(self) -> bool:
        """An error status, or an error event and not one content event."""
        if self.status is None or self.status >= 400:
            return True
        return self.terminal == "error" and self.content_events == 0


@dataclass(frozen=True)
class Observed:
    """The first connection (its events' data, how it ended), the stream's id (None: the proxy
    sent no ``X-Stream-Id``), and the two resumes (None: not made); ``reached`` False: the
    request never reached the upstream."""

    reached: bool
    stream_id: str | None
    first: tuple[str, ...]
    first_terminal: str
    old: Resumed | None
    recent: Resumed | None


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)
    first = await open_resumable(ctx, SEED, SCENARIO, drop_after=None, limit_s=limit)
    stream, events = stream_id(first), len(first.events)
    old = recent = None
    if stream is not None and first.terminal == "done":
        old_capture = await resume_from(
            ctx, stream, str(OLD_CURSOR), drop_after=None, limit_s=limit
        )
        old = Resumed.of(OLD_CURSOR, old_capture)
        cursor = events - RECENT_BACK
        recent_capture = await resume_from(ctx, stream, str(cursor), drop_after=None, limit_s=limit)
        recent = Resumed.of(cursor, recent_capture)
    record = await ctx.record(SEED, until=finished)
    return Observed(
        reached=record is not None,
        stream_id=stream,
        first=tuple(e.data for e in first.events),
        first_terminal=first.terminal,
        old=old,
        recent=recent,
    )


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the old cursor refused, the recent one answered with the events after it (as the
    first connection got them) to the end."""
    if not observed.reached:
        return result.never_reached({})
    old, recent = observed.old, observed.recent
    evidence: Evidence = {
        "replay_events": BOUND,
        "answer_events": len(observed.first),
        "first_terminal": observed.first_terminal,
        "old_cursor": OLD_CURSOR,
        "old_status": None if old is None else old.status,
        "old_content_events": None if old is None else old.content_events,
        "recent_cursor": None if recent is None else recent.cursor,
        "recent_status": None if recent is None else recent.status,
        "recent_events": None if recent is None else len(recent.data),
        "recent_terminal": None if recent is None else recent.terminal,
    }
    if observed.stream_id is None:
        return result.failed(
            "the response had no X-Stream-Id header, so the stream could not be resumed",
            evidence,
            NO_STREAM_ID_ADVICE,
        )
    if old is None or recent is None:
        return result.failed(
            "the resumable stream did not reach its end",
            evidence,
            "follow the log to the end of the answer, data: [DONE] included.",
        )
    if old.content_events:
        return result.failed(
            "the proxy replayed events from a cursor older than its log may keep",
            evidence,
            BOUND_ADVICE,
        )
    if not old.refused:
        return result.failed(
            "the proxy did not refuse a cursor older than its log may keep",
            evidence,
            BOUND_ADVICE,
        )
    expected = observed.first[recent.cursor :]
    if recent.status != 200 or recent.data != expected or recent.terminal != "done":
        return result.failed(
            "a resume from a recent cursor did not give the events after it",
            evidence,
            RECENT_ADVICE,
        )
    return result.passed(
        "a cursor older than the log keeps is refused, and a recent one resumes", evidence
    )
