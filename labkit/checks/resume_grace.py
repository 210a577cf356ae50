"""``resume_grace``: a drop is not a Stop; nobody back within the grace period stops the
upstream.

A resumable answer (``X-Resumable: true``) runs apart from its client's connection, so that a
client that drops can come back (``labkit.checks.resume``). A proxy that never lets go of an
answer nobody reads bills for it to its end; a proxy that cancels on the drop, as a plain stream
does, has no resume to offer. (``resume_stop`` is the other way a resumable answer ends: Stop.)

Experiment: an 80 s answer (1,600 tokens at 20 tokens/s), resumable; the client drops after
DROP_AFTER content events and never comes back. The grader starts this check's proxy with
``RESUME_GRACE_S`` = GRACE_S (3 s, ``PROXY_ENV``). Pass: the upstream is still generating PROBE_S
(1 s) after the drop (a drop is not a Stop), it is ``cancelled`` within GRACE_S + SLACK_S (7 s;
the slack stretches below one CPU with the run's ``Budget``) of the drop, and the usage log
holds one line for it, ``cancelled``. SLACK_S (4 s) allows a reader's last wait (a follower that
waits a heartbeat interval, 2 s in the reference, counts as reading until that wait ends, so the
reference stops about 5.2 s after the drop), the producer's look at the log (every 0.25 s) and a
loaded machine. A proxy that cancels on the drop stops within milliseconds, well before PROBE_S;
one that never lets go runs the whole 80 s, more than ten times the bound.

``observe`` runs the experiment; ``judge`` decides, and is tested on constructed observations in
process (tests/checks/test_judges_resume_grace.py). The waits (the first events, the record, the
usage line) stretch with the run's ``Budget``, as the slack does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labkit.checks._hang_up import stop_after_hang_up_ms
from labkit.checks._usage_lines import USAGE_ADVICE, usage_evidence, usage_lines, usage_problem
from labkit.checks.context import CheckContext, Outcome, Record, finished, ms
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult, Evidence
from labkit.checks.resume import NO_STREAM_ID_ADVICE, STEP, open_resumable, stream_id
from labkit.checks.usage import LOG_WAIT_S

__all__ = [
    "BUDGET_S",
    "GRACE_S",
    "ID",
    "MOCK_ONLY",
    "PROXY_ENV",
    "STEP",
    "SUMMARY",
    "Dropped",
    "judge",
    "observe",
]

ID = "resume_grace"
SUMMARY = "a drop is not a Stop; nobody back within the grace period stops the upstream"
BUDGET_S = 24.0
MOCK_ONLY = "needs the mock's record of when a paced answer stopped"
SEED = 7512

GRACE_S = 3.0  # RESUME_GRACE_S for this check's proxy
PROXY_ENV = {"RESUME_GRACE_S": f"{GRACE_S:g}"}
SCENARIO = {"ttft_ms": 100, "tps": 20, "tokens": 1600}
DROP_AFTER = 10
PROBE_S = 1.0  # after the drop: the upstream must still be generating
SLACK_S = 4.0  # after the grace period: a reader's last wait, the producer's look, a busy machine
POLL_MARGIN_S = 0.25  # the record is watched this much past the bound, twice over
FIRST_EVENTS_S = 5.0  # for the events before the drop (due within half a second)

DROP_ADVICE = (
    "keep a resumable answer going when its client's connection drops: only Stop, or nobody "
    "reading it for RESUME_GRACE_S, cancels it."
)
GRACE_ADVICE = (
    "have the producer ask the log, every fraction of a second, whether anybody read the answer "
    "within RESUME_GRACE_S, and stop it (closing relay's body) when nobody did."
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Dropped:
    """The stream's id (None: no ``X-Stream-Id``), when the client dropped (the clock of the
    mock's records), the record's state PROBE_S after the drop, the record as it ended up
    (None: it never arrived), the usage log's lines for it (None: no log), and how long after
    the drop the upstream may stop (GRACE_S + SLACK_S, the slack stretched for the machine's
    ``Budget``)."""

    stream_id: str | None
    dropped_at: float
    state_at_probe: str | None
    record: Record | None
    usage_lines: tuple[Mapping[str, Any], ...] | None
    allowed_s: float = GRACE_S + SLACK_S


async def observe(ctx: CheckContext) -> Dropped:
    stretch = ctx.budget.stretch
    capture = await open_resumable(
        ctx, SEED, SCENARIO, drop_after=DROP_AFTER, limit_s=stretch(FIRST_EVENTS_S)
    )
    dropped_at = capture.started_at + capture.total_time
    await asyncio.sleep(max(0.0, dropped_at + PROBE_S - time.time()))
    probe = await ctx.record(SEED)
    allowed = GRACE_S + stretch(SLACK_S)
    watch_s = dropped_at + allowed + 2 * POLL_MARGIN_S - time.time()
    record = await ctx.record(SEED, until=finished, wait_s=max(0.0, watch_s))
    ended = record is not None and finished(record)
    lines = None
    if record is not None:
        wait_s = stretch(LOG_WAIT_S) if ended else 0.0
        lines = await usage_lines(ctx.usage_log, record["id"], wait_s)
    return Dropped(
        stream_id(capture),
        dropped_at,
        None if probe is None else probe.get("state"),
        record,
        lines,
        allowed,
    )


def judge(observed: Dropped, budget: Budget) -> CheckResult:
    """Pass: still generating PROBE_S after the drop, ``cancelled`` within ``allowed_s`` of it
    (the slack stretched for the machine ``observe`` ran on), and the usage log (if there is
    one) has one line for it, ``cancelled``."""
    record = observed.record
    if record is None:
        return result.never_reached({})
    ended = record.get("ended_at") if finished(record) else None
    evidence: Evidence = {
        "upstream_state_at_probe": observed.state_at_probe,
        "probe_after_drop_ms": ms(PROBE_S),
        "upstream_state": record.get("state"),
        "upstream_stop_after_drop_ms": stop_after_hang_up_ms(record, observed.dropped_at),
        "allowed_after_drop_ms": ms(observed.allowed_s),
        "resume_grace_s": GRACE_S,
        "tokens_generated": record.get("tokens_generated"),
        **usage_evidence(observed.usage_lines),
    }
    if observed.stream_id is None:
        return result.failed(
            "the response had no X-Stream-Id header, so the stream was not resumable",
            evidence,
            NO_STREAM_ID_ADVICE,
        )
    if observed.state_at_probe != "running":
        return result.failed(
            "the upstream stopped when the client dropped: a drop is not a Stop",
            evidence,
            DROP_ADVICE,
        )
    in_time = ended is not None and ended - observed.dropped_at <= observed.allowed_s
    if not (record.get("state") == "cancelled" and in_time):
        if record.get("state") in ("running", "completed"):
            verdict = "the upstream kept generating after the grace period with nobody reading"
        else:
            verdict = "the upstream was not stopped promptly when the grace period ended"
        return result.failed(verdict, evidence, GRACE_ADVICE)
    if usage_problem(observed.usage_lines):
        return result.failed(
            "the usage log does not have one cancelled line for the abandoned answer",
            evidence,
            USAGE_ADVICE,
        )
    return result.passed(
        "a drop left the upstream generating, and the grace period with nobody back stopped it",
        evidence,
    )
