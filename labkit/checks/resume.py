"""``resume``: a resumable stream survives a dropped connection; the client comes back with the
last event id it got and reads on, losing and repeating nothing.

A client opts in per request (``X-Resumable: true``); the proxy answers with the stream's id in
``X-Stream-Id`` and numbers every event it sends with ``id: N`` (1, 2, 3 ... for the answer,
across connections). ``GET /v1/streams/{id}`` with ``Last-Event-ID: N`` gives the events after
N, then the live tail. The classic ways to get it wrong: no ``id:`` lines (the client cannot say
where it was), a resume that replays from the start (every event the client had comes twice),
and a resumed connection that numbers its events from 1 again (the next drop sends the client
back to a cursor that means something else: events come twice).

Experiment (``resume``): a stream of TOKENS tokens at 40 tokens/s, asked resumable; the client
drops after DROP_AFTER content events, stays away AWAY_S, comes back with ``Last-Event-ID`` set
to the last id it got, and reads to the end. (``resume_twice`` is the same, but the first
resumed connection is dropped too.) The upstream's own events come from the same request sent
straight to the mock, at full speed (the text depends on the seed, not the pace), and the two
are compared event by event as ``integrity`` compares them (``integrity.compare``).

Pass: every event carried an ``id:`` of its own, numbered 1, 2, 3 ... across every connection;
each resume was answered 200; the last connection ended with ``[DONE]``; and the content events
the client put together equal the upstream's, one for one. Nothing is timed but the pacing that
puts the drop mid-way: a proxy that loses, repeats or misnumbers events does so on any machine.
Each connection is given up after LIMIT_S, stretched with the run's ``Budget`` (a stream that
never sends its events is judged on what came). ``observe`` runs the connections; ``judge``
decides (tested in process: tests/checks/test_judges_resume.py).

The other checks of notebook 15: ``resume_twice``, ``resume_stop`` and ``resume_grace``,
``replay_bound``, and in the ``gateway`` profile ``resume_replica`` (the same experiment,
resumed on another replica), each in a module of its own. They share ``open_resumable``,
``resume_from``, ``observe_drops`` and ``judge_drops`` from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished
from labkit.checks.integrity import compare, content_events
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult, Evidence

__all__ = [
    "BUDGET_S",
    "ID",
    "MOCK_ONLY",
    "RESUMABLE",
    "STEP",
    "SUMMARY",
    "Leg",
    "Observed",
    "judge",
    "judge_drops",
    "last_id",
    "observe",
    "observe_drops",
    "open_resumable",
    "resume_from",
    "stream_id",
]

ID = "resume"
STEP = "15_resumable_streams"
SUMMARY = "a resumable stream survives a dropped connection, nothing lost or repeated"
MOCK_ONLY = "needs the same answer twice from the upstream, which only the mock's seeds give"
RESUMABLE: Mapping[str, str] = {"X-Resumable": "true"}
STREAM_ID_HEADER = "x-stream-id"
SEED = 7501
TOKENS = 60
SCENARIO = {"ttft_ms": 100, "tps": 40, "tokens": TOKENS}
# The upstream's copy: the same text, without the wait.
FULL_SPEED = {"ttft_ms": 0, "tps": 1000}
DROP_AFTER = 15  # content events on a connection before the client drops it
AWAY_S = 0.3  # between a drop and the resume: events pile up in the log meanwhile
LIMIT_S = 8.0  # one connection, at most (the whole answer takes 1.6 s), at one CPU
BUDGET_S = 20.0

NO_STREAM_ID_ADVICE = (
    "answer a request with X-Resumable: true from the replay log (produce runs the answer into "
    "it, follow reads it) and send the answer's id in the X-Stream-Id header."
)
ID_ADVICE = (
    "give every event follow sends an id: line with its number in the answer (id: N, then the "
    "event), so a client that comes back can send Last-Event-ID."
)

result = Outcome(ID, STEP)


async def open_resumable(
    ctx: CheckContext,
    seed: int,
    scenario: Mapping[str, object],
    *,
    drop_after: int | None,
    limit_s: float,
) -> Capture:
    """POST a streamed chat request asked resumable; drop after ``drop_after`` content events
    (None: read to the end), and after ``limit_s`` whatever came."""
    return await acapture_stream(
        ctx.chat_url,
        json=chat_body(seed, scenario),
        headers=RESUMABLE,
        disconnect_after_events=drop_after,
        disconnect_after_s=limit_s,
        timeout=limit_s,
    )


async def resume_from(
    ctx: CheckContext,
    stream: str,
    cursor: str,
    *,
    drop_after: int | None,
    limit_s: float,
    at: str | None = None,
) -> Capture:
    """``GET /v1/streams/{stream}`` with ``Last-Event-ID: cursor``, read like ``open_resumable``,
    from the proxy at ``at`` (default: ``ctx``'s; another replica for ``resume_replica``)."""
    return await acapture_stream(
        f"{at or ctx.proxy_url}/v1/streams/{stream}",
        method="GET",
        headers={"Last-Event-ID": cursor},
        disconnect_after_events=drop_after,
        disconnect_after_s=limit_s,
        timeout=limit_s,
    )


def stream_id(capture: Capture) -> str | None:
    """The stream's id from the response's ``X-Stream-Id`` header (None: none)."""
    return capture.headers.get(STREAM_ID_HEADER) or None


def last_id(capture: Capture) -> str | None:
    """The last event id the client got (the SSE last-event-id: an event without an ``id:``
    line keeps the one before), or None."""
    return capture.events[-1].id if capture.events else None


@dataclass(frozen=True)
class Leg:
    """One connection of a resumable stream as the client saw it: its status, the id of each
    event as the SSE spec reads it (an event without an ``id:`` line keeps the one before it;
    None: no id yet on this connection), the text of its content events, and how it ended."""

    status: int | None
    ids: tuple[str | None, ...]
    received: tuple[str, ...]
    terminal: str

    @classmethod
    def of(cls, capture: Capture) -> Leg:
        ids = tuple(e.id for e in capture.events)
        return cls(capture.status, ids, content_events(capture), capture.terminal)

    @property
    def ids_missing(self) -> int:
        """Events that came without an ``id:`` of their own: no id yet on the connection, or
        the id of the event before (which an event without an ``id:`` line keeps)."""
        before = (None, *self.ids[:-1])
        return sum(1 for now, then in zip(self.ids, before, strict=False) if now in (None, then))


@dataclass(frozen=True)
class Observed:
    """The first connection and each resumed one (``legs``), the stream's id (None: the proxy
    sent no ``X-Stream-Id``), the resumes the experiment meant to make (``drops``), and the
    upstream's own content events for the same request (None: it never reached the upstream)."""

    stream_id: str | None
    legs: tuple[Leg, ...]
    sent: tuple[str, ...] | None
    drops: int


async def observe(ctx: CheckContext) -> Observed:
    return await observe_drops(ctx, SEED, SCENARIO, drops=1)


async def observe_drops(
    ctx: CheckContext,
    seed: int,
    scenario: Mapping[str, object],
    *,
    drops: int,
    resume_at: str | None = None,
) -> Observed:
    """The experiment with ``drops`` drops, each resumed from the proxy at ``resume_at``
    (default: the one that took the request; another replica for ``resume_replica``)."""
    limit = ctx.budget.stretch(LIMIT_S)
    direct = await acapture_stream(
        f"{ctx.upstream_url}/v1/chat/completions",
        json=chat_body(seed, {**scenario, **FULL_SPEED}),
        timeout=limit,
    )
    first = await open_resumable(ctx, seed, scenario, drop_after=DROP_AFTER, limit_s=limit)
    stream, captures = stream_id(first), [first]
    for n in range(drops):
        cursor = last_id(captures[-1])
        if stream is None or cursor is None or captures[-1].terminal != "disconnected":
            break  # nothing to resume from: the judge says why
        await asyncio.sleep(AWAY_S)
        drop_after = DROP_AFTER if n + 1 < drops else None
        captures.append(
            await resume_from(
                ctx, stream, cursor, drop_after=drop_after, limit_s=limit, at=resume_at
            )
        )
    record = await ctx.record(seed, until=finished)
    reached = record is not None and record.get("scenario", {}).get("tps") == scenario["tps"]
    return Observed(
        stream_id=stream,
        legs=tuple(Leg.of(c) for c in captures),
        sent=content_events(direct) if reached else None,
        drops=drops,
    )


def _numbered(legs: tuple[Leg, ...]) -> bool:
    """Every event's id is its place in the answer: 1, 2, 3 ... across the connections."""
    ids = [i for leg in legs for i in leg.ids]
    return ids == [str(n) for n in range(1, len(ids) + 1)]


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """``judge_drops`` for this check (nothing timed: ``budget`` moves nothing)."""
    return judge_drops(observed, result)


def judge_drops(observed: Observed, outcome: Outcome) -> CheckResult:
    """Pass: ids of their own; every resume answered; the end reached; the content events put
    together equal the upstream's, one for one; and the ids numbered 1, 2, 3 ... across the
    connections. The verdict names the first of these that failed; ``outcome`` is the check
    whose result it is."""
    if observed.sent is None:
        return outcome.never_reached({})
    legs = observed.legs
    received = tuple(text for leg in legs for text in leg.received)
    difference = compare(observed.sent, received)
    evidence: Evidence = {
        "stream_id_header": observed.stream_id is not None,
        "connections": len(legs),
        "resumes_planned": observed.drops,
        "resume_statuses": ",".join(str(leg.status) for leg in legs[1:]),
        "events_without_id": sum(leg.ids_missing for leg in legs),
        "ids": ",".join(f"{leg.ids[0]}-{leg.ids[-1]}" if leg.ids else "-" for leg in legs),
        "terminal": legs[-1].terminal,
        "upstream_events": len(observed.sent),
        "client_events": len(received),
        "events_lost": difference.lost,
        "events_extra": difference.extra,
        "events_moved": difference.moved,
        "first_difference_at_event": difference.first_at,
    }
    if legs[0].status != 200 or observed.stream_id is None:
        return outcome.failed(
            "the response had no X-Stream-Id header, so the stream could not be resumed",
            evidence,
            NO_STREAM_ID_ADVICE,
        )
    if any(leg.ids_missing for leg in legs):
        return outcome.failed(
            "events need id: lines: some came without one, so the client could not say where "
            "it was",
            evidence,
            ID_ADVICE,
        )
    if any(leg.status != 200 for leg in legs[1:]):
        return outcome.failed(
            "the proxy did not resume the stream from the client's last event id",
            evidence,
            "answer GET /v1/streams/{id} with Last-Event-ID: N with the events after N, then "
            "the live ones (404 only for a stream or a cursor the log no longer has).",
        )
    if len(legs) <= observed.drops and legs[-1].terminal == "done":
        return outcome.failed(
            "the stream ended before the client dropped it, so nothing was resumed",
            evidence,
            "send each event as it comes: the client drops the stream half-way.",
        )
    if len(legs) == 1:
        return outcome.failed(
            "the stream stopped before the client could drop it",
            evidence,
            "send each event of a resumable answer as it comes, each with its id: line.",
        )
    if legs[-1].terminal != "done":
        return outcome.failed(
            "the resumed stream did not reach its end",
            evidence,
            "keep the answer going while its client is away (a drop is not a Stop), and follow "
            "the log to its end, data: [DONE] included.",
        )
    if difference.same and not _numbered(legs):
        return outcome.failed(
            "the resumed events were not numbered on from the client's last event id",
            evidence,
            "number each event by its place in the answer (the log's sequence number), the "
            "same on every connection, never per connection.",
        )
    if difference.same:
        verdict = (
            "the client resumed twice and got every event once and in order"
            if observed.drops > 1
            else "the client resumed after a drop and got every event once and in order"
        )
        return outcome.passed(verdict, evidence)
    if difference.lost:
        verdict = "the resumed stream lost events the upstream sent"
        advice = "give the client every logged event after its cursor, then the live ones."
    elif difference.extra:
        verdict = "the resumed stream repeated events the client already had"
        advice = "start a resumed connection after the client's cursor, not at the start."
    else:
        verdict = "the resumed stream gave the upstream's events out of order"
        advice = "send the logged events in their order, then the live ones."
    return outcome.failed(verdict, evidence, advice)
