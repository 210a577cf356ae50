"""``integrity``: the client receives what the upstream sent, event by event: nothing lost,
repeated or reordered.

A proxy can trickle, cancel and keep alive and still lose text. The classic way is a heartbeat
timer that leaves its read of the queue running when it fires (``asyncio.wait`` on a
``queue.get()`` task it never cancels): the abandoned read takes the next event, and nobody
ever sends it. One event is lost per heartbeat, the stream still ends with ``[DONE]``, and no
timing check notices. The other way is reading the upstream's lines with httpx's ``aiter_lines``,
which ends a line at U+2028, U+2029 and U+0085 too, where SSE ends one only at CR and LF: an
engine that writes its JSON as UTF-8 (llama.cpp does) sends those raw, and the event whose
``data:`` line they cut is lost. The answer here opens with them (the mock's
``separator_tokens``), and a loss there gets advice of its own (``lost_at_line_ends``).

Experiment: a stream of TOKENS tokens whose upstream falls silent for SILENCE_S (3 s: a 2 s
heartbeat fires in it, and httpx's default 5 s read timeout does not) after STALL_AFTER tokens.
The upstream's own events come from the same request sent straight to the mock (its text
depends on the request and its seed, not its pace, so that copy is sent at full speed). The
two are compared by their content events' text, in order (``compare``).

Pass: the proxied stream ends with ``[DONE]`` and its content events equal the upstream's, one
for one. A lost, repeated or reordered event fails, naming which. Nothing is timed: a proxy that
loses events loses them on any machine. ``observe`` runs both streams; ``judge`` decides (tested
in process: tests/checks/test_judges_integrity.py). Each stream is given up after LIMIT_S,
stretched with the run's ``Budget``.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult, Evidence
from labkit.wire import interpret_event

ID = "integrity"
STEP = "07_heartbeats_and_timeouts"
SUMMARY = "the client gets every upstream event, once and in order"
MOCK_ONLY = (
    "needs the same text twice from the upstream and a silence mid-stream, "
    "which only the mock's seeds and pacing give"
)
SEED = 6501
TOKENS = 40
STALL_AFTER = 15
SILENCE_S = 3.0
SEPARATORS = 7  # the answer opens with U+2028, U+2029 and U+0085 between ellipses, sent raw
SCENARIO = {
    "ttft_ms": 200,
    "tps": 40,
    "tokens": TOKENS,
    "separator_tokens": SEPARATORS,
    "stall_after": STALL_AFTER,
    "stall_s": SILENCE_S,
}
#: Line ends of ``str.splitlines`` that SSE does not split at (only CR and LF end an SSE line).
UNICODE_LINE_ENDS = ("\u2028", "\u2029", "\x85")
# The upstream's copy: the same text, without the wait.
FULL_SPEED = {**SCENARIO, "ttft_ms": 0, "tps": 1000, "stall_s": 0.0}
LIMIT_S = 10.0
BUDGET_S = 16.0

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Difference:
    """How the client's content events differ from the upstream's: events missing, events
    extra (repeated or made up), and events moved. All zero: the same stream."""

    lost: int = 0
    extra: int = 0
    moved: int = 0
    first_at: int | None = None  # the index of the first upstream event that differs

    @property
    def same(self) -> bool:
        return not (self.lost or self.extra or self.moved)


def compare(sent: Sequence[str], received: Sequence[str]) -> Difference:
    """Compare the upstream's content events with the client's, in order. An event that is
    missing in one place and present in another counts as moved, not lost and extra."""
    matcher = difflib.SequenceMatcher(a=sent, b=received, autojunk=False)
    missing: list[str] = []
    added: list[str] = []
    first_at = None
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        first_at = i1 if first_at is None else first_at
        missing += sent[i1:i2]
        added += received[j1:j2]
    moved = 0
    for event in list(missing):
        if event in added:
            added.remove(event)
            missing.remove(event)
            moved += 1
    return Difference(len(missing), len(added), moved, first_at)


def lost_at_line_ends(sent: Sequence[str], received: Sequence[str]) -> bool:
    """Whether an upstream event whose text holds one of ``UNICODE_LINE_ENDS`` is missing from
    what the client got (counted: an event sent twice must arrive twice)."""
    got = Counter(received)
    return any(
        got[text] < count
        for text, count in Counter(sent).items()
        if any(end in text for end in UNICODE_LINE_ENDS)
    )


def content_events(capture: Capture) -> tuple[str, ...]:
    """The text of each content event of a capture, in order."""
    return tuple(interpret_event(e.event, e.data).text for e in capture.events if e.token)


@dataclass(frozen=True)
class Observed:
    """The client's stream (status, ending, content events) and the upstream's own content
    events for the same request (None: it never reached the upstream)."""

    status: int | None
    terminal: str
    received: tuple[str, ...]
    sent: tuple[str, ...] | None


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)
    direct = await acapture_stream(
        f"{ctx.upstream_url}/v1/chat/completions", json=chat_body(SEED, FULL_SPEED), timeout=limit
    )
    proxied = await acapture_stream(ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=limit)
    record = await ctx.record(SEED, until=finished)
    reached = record is not None and record.get("scenario", {}).get("stall_s") == SILENCE_S
    return Observed(
        status=proxied.status,
        terminal=proxied.terminal,
        received=content_events(proxied),
        sent=content_events(direct) if reached else None,
    )


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the stream ended with ``[DONE]`` and its content events equal the upstream's."""
    if observed.sent is None:
        return result.never_reached({"status": observed.status})
    difference = compare(observed.sent, observed.received)
    evidence: Evidence = {
        "terminal": observed.terminal,
        "upstream_events": len(observed.sent),
        "client_events": len(observed.received),
        "events_lost": difference.lost,
        "events_extra": difference.extra,
        "events_moved": difference.moved,
        "first_difference_at_event": difference.first_at,
        "upstream_silence_ms": int(SILENCE_S * 1000),
    }
    if observed.status != 200 or observed.terminal != "done":
        return result.failed(
            "the stream did not reach its end, so its text could not be compared",
            evidence,
            "keep the stream open through the upstream's silence (heartbeats, no read timeout "
            "shorter than it) and forward every event up to data: [DONE].",
        )
    if difference.same:
        return result.passed(
            "the client got every event the upstream sent, once and in order", evidence
        )
    if difference.lost and lost_at_line_ends(observed.sent, observed.received):
        verdict = (
            "the client lost the events whose text holds a Unicode line or paragraph separator: "
            "their data lines were cut in two"
        )
        advice = (
            "split the upstream's body into lines only at CR and LF, as SSE does (sse_lines over "
            "upstream.aiter_bytes(), notebook 04): httpx's aiter_lines also ends a line at "
            "U+2028, U+2029 and U+0085, which an engine writing UTF-8 JSON sends raw."
        )
    elif difference.lost:
        verdict = "the client lost events the upstream sent"
        advice = (
            "never leave a read of the queue running after a heartbeat timer fires: wait with "
            "asyncio.timeout around queue.get() (it gives the item back), or cancel the get."
        )
    elif difference.extra:
        verdict = "the client got events the upstream did not send, or got some twice"
        advice = "send each upstream event once, as it came."
    else:
        verdict = "the client got the upstream's events out of order"
        advice = "send events from one queue, in the order the reader put them there."
    return result.failed(verdict, evidence, advice)
