"""``resume_stop`` and ``resume_grace``: how a resumable answer ends when its client does not
read it to the end. Stop cancels the upstream at once; a drop does not, but nobody back within
the grace period does.

A resumable answer (``X-Resumable: true``) runs apart from its client's connection, so that a
client that drops can come back (``labkit.checks.resume``). That cuts both ways: a proxy whose
Stop (``POST /v1/streams/{id}/cancel``) only answers 200 leaves the model generating, and billed,
for a reader who said stop, until the grace period ends; a proxy that never lets go of an
answer nobody reads bills for it to its end. And a proxy that cancels on the drop, as a plain
stream does, has no resume to offer.

``resume_stop``: a 20 s answer (400 tokens at 20 tokens/s), resumable; the client drops after
STOP_AFTER content events and at once sends Stop. The grader starts this check's proxy with
``RESUME_GRACE_S`` = STOP_GRACE_S (30 s), so a Stop that stops nothing is left running for at
least 30 s. Pass: Stop answered 200 saying ``cancelled``, the mock records the request
``cancelled`` within MAX_STOP_S (1 s) of Stop's answer, and the usage log holds one line for
it, ``cancelled``. (The clock starts at the answer, not at the request: a grading machine too
busy to answer a request for a second, which has happened beside other gradings, is not a
proxy that stops late.) The reference stops within milliseconds; a Stop that stops nothing
leaves the upstream running the whole 20 s (the check watches it for WAIT_S, 2 s).

``resume_grace``: an 80 s answer (1,600 tokens at 20 tokens/s), resumable; the client drops
after GRACE_DROP_AFTER content events and never comes back. The grader starts this check's
proxy with ``RESUME_GRACE_S`` = GRACE_S (3 s). Pass: the upstream is still generating
PROBE_S (1 s) after the drop (a drop is not a Stop), it is ``cancelled`` within GRACE_S +
SLACK_S (7 s; the slack stretches below one CPU with the grading's ``Budget``) of the drop, and
the usage log holds one line for it, ``cancelled``. SLACK_S (4 s) allows a reader's last wait
(a follower that waits a heartbeat interval, 2 s in the reference, counts as reading until that
wait ends, so the reference stops about 5.2 s after the drop), the producer's look at the log
(every 0.25 s) and a loaded machine. A proxy that cancels on the drop stops within
milliseconds, well before PROBE_S; one that never lets go runs the whole 80 s, more than ten
times the bound.

``observe_*`` run the experiments; the ``judge_*`` decide, and are tested on constructed
observations in process (tests/grading/test_judges_resume_cancel.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from labkit.checks.cancel import WAIT_S, stop_after_hang_up_ms, stopped_in_time
from labkit.checks.context import CheckContext, Outcome, Record, finished, ms
from labkit.checks.result import CheckResult, Evidence
from labkit.checks.resume import NO_STREAM_ID_ADVICE, STEP, open_resumable, stream_id
from labkit.checks.usage import LOG_WAIT_S, read_log

__all__ = [
    "GRACE_ID",
    "GRACE_S",
    "STOP_GRACE_S",
    "STOP_ID",
    "Dropped",
    "Stopped",
    "judge_grace",
    "judge_stop",
    "observe_grace",
    "observe_stop",
]

STOP_ID = "resume_stop"
GRACE_ID = "resume_grace"
STOP_SEED, GRACE_SEED = 7511, 7512

STOP_GRACE_S = 30.0  # RESUME_GRACE_S for resume_stop's proxy: far past any Stop's bound
STOP_SCENARIO = {"ttft_ms": 100, "tps": 20, "tokens": 400}
STOP_AFTER = 5  # content events read before Stop
STOP_ANSWER_S = 5.0  # for Stop's answer: a proxy answers it at once, a busy machine a bit later
STOP_BUDGET_S = 16.0

GRACE_S = 3.0  # RESUME_GRACE_S for resume_grace's proxy
GRACE_SCENARIO = {"ttft_ms": 100, "tps": 20, "tokens": 1600}
GRACE_DROP_AFTER = 10
PROBE_S = 1.0  # after the drop: the upstream must still be generating
SLACK_S = 4.0  # after the grace period: a reader's last wait, the producer's look, a busy machine
GRACE_BUDGET_S = 24.0
POLL_MARGIN_S = 0.25  # the record is watched this much past the bound, twice over

FIRST_EVENTS_S = 5.0  # for the events before the drop (due within half a second)
USAGE_WAIT_S = LOG_WAIT_S

STOP_ADVICE = (
    "on POST /v1/streams/{id}/cancel ask the log to stop the answer, and have its producer "
    "stop at once when asked (close relay's body, which closes the upstream), then answer 200."
)
DROP_ADVICE = (
    "keep a resumable answer going when its client's connection drops: only Stop, or nobody "
    "reading it for RESUME_GRACE_S, cancels it."
)
GRACE_ADVICE = (
    "have the producer ask the log, every fraction of a second, whether anybody read the answer "
    "within RESUME_GRACE_S, and stop it (closing relay's body) when nobody did."
)
USAGE_ADVICE = (
    "log a resumable answer's usage once, when its producer ends it: relay's finally runs once, "
    "cancelled for Stop and for the grace period, whatever its followers do."
)

stop_result = Outcome(STOP_ID, STEP)
grace_result = Outcome(GRACE_ID, STEP)


async def _usage_lines(
    log: Path | None, completion_id: object, wait: bool
) -> tuple[Mapping[str, Any], ...] | None:
    """The usage log's lines for ``completion_id`` (None: no log to read). With ``wait``, up to
    USAGE_WAIT_S for the first one."""
    if log is None:
        return None
    deadline = time.monotonic() + (USAGE_WAIT_S if wait else 0.0)
    while True:
        lines, _ = await asyncio.to_thread(read_log, log)
        found = tuple(line for line in lines if line.get("id") == completion_id)
        if found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(0.05)


def _usage_problem(lines: tuple[Mapping[str, Any], ...] | None) -> bool:
    """Whether the lines are not exactly one ``cancelled`` line (no log: nothing to judge)."""
    if lines is None:
        return False
    return len(lines) != 1 or lines[0].get("outcome") != "cancelled"


def _usage_evidence(lines: tuple[Mapping[str, Any], ...] | None) -> Evidence:
    if lines is None:
        return {"usage_log": "not read"}
    outcomes = ",".join(str(line.get("outcome")) for line in lines)
    return {"usage_lines": len(lines), "usage_outcomes": outcomes}


@dataclass(frozen=True)
class Stopped:
    """``resume_stop``: the stream's id (None: no ``X-Stream-Id``), when Stop was sent and when
    its answer came (the clock of the mock's records; None: no answer), Stop's status and body,
    the mock's record of the request as it ended up (None: it never arrived), the usage
    log's lines for it (None: no log), and the proxy's ``RESUME_GRACE_S`` (None: the grader
    did not choose it, as for ``resume_replica``'s replicas)."""

    stream_id: str | None
    stopped_at: float
    answered_at: float | None
    stop_status: int | None
    stop_body: Mapping[str, Any] | None
    record: Record | None
    usage_lines: tuple[Mapping[str, Any], ...] | None
    grace_s: float | None = STOP_GRACE_S


async def _stop(
    ctx: CheckContext, stream: str, at: str
) -> tuple[int | None, Mapping[str, Any] | None]:
    try:
        async with httpx.AsyncClient(timeout=ctx.budget.stretch(STOP_ANSWER_S)) as client:
            answer = await client.post(f"{at}/v1/streams/{stream}/cancel")
    except httpx.HTTPError:
        return None, None
    try:
        body = answer.json()
    except ValueError:
        return answer.status_code, None
    return answer.status_code, body if isinstance(body, dict) else None


async def observe_stop(
    ctx: CheckContext,
    *,
    seed: int = STOP_SEED,
    stop_at: str | None = None,
    grace_s: float | None = STOP_GRACE_S,
) -> Stopped:
    """The experiment, its request tagged ``seed``, Stop sent to the proxy at ``stop_at``
    (default: the one that took the request; another replica for ``resume_replica``, whose
    proxies run with a ``grace_s`` of their own)."""
    limit = ctx.budget.stretch(FIRST_EVENTS_S)
    capture = await open_resumable(ctx, seed, STOP_SCENARIO, drop_after=STOP_AFTER, limit_s=limit)
    stream = stream_id(capture)
    stopped_at = time.time()
    status, body = (
        (None, None) if stream is None else await _stop(ctx, stream, stop_at or ctx.proxy_url)
    )
    answered_at = None if status is None else time.time()
    record = await ctx.record(seed, until=finished, wait_s=WAIT_S)
    ended = record is not None and finished(record)
    lines = None if record is None else await _usage_lines(ctx.usage_log, record["id"], ended)
    return Stopped(stream, stopped_at, answered_at, status, body, record, lines, grace_s)


def judge_stop(observed: Stopped) -> CheckResult:
    """Pass: Stop answered 200 ``cancelled``, the mock recorded the request ``cancelled`` within
    MAX_STOP_S of that answer, and the usage log (if there is one) has one line for it,
    ``cancelled``."""
    record = observed.record
    if record is None:
        return stop_result.never_reached({})
    evidence: Evidence = {
        "stop_status": observed.stop_status,
        "stop_answered_after_ms": None
        if observed.answered_at is None
        else ms(observed.answered_at - observed.stopped_at),
        "stop_says": None if observed.stop_body is None else observed.stop_body.get("status"),
        "upstream_state": record.get("state"),
        "upstream_stop_after_stop_ms": stop_after_hang_up_ms(record, observed.stopped_at),
        "tokens_generated": record.get("tokens_generated"),
        **({} if observed.grace_s is None else {"resume_grace_s": observed.grace_s}),
        **_usage_evidence(observed.usage_lines),
    }
    if observed.stream_id is None:
        return stop_result.failed(
            "the response had no X-Stream-Id header, so there was no stream to stop",
            evidence,
            NO_STREAM_ID_ADVICE,
        )
    said_cancelled = observed.stop_body is not None and observed.stop_body.get("status") == (
        "cancelled"
    )
    if observed.stop_status != 200 or not said_cancelled:
        return stop_result.failed(
            "the proxy did not answer Stop with the stream cancelled", evidence, STOP_ADVICE
        )
    if not stopped_in_time(record, observed.answered_at or observed.stopped_at):
        if record.get("state") in ("running", "completed"):
            verdict = "the upstream kept generating after Stop"
        else:
            verdict = "the upstream did not stop promptly after Stop"
        return stop_result.failed(verdict, evidence, STOP_ADVICE)
    if _usage_problem(observed.usage_lines):
        return stop_result.failed(
            "the usage log does not have one cancelled line for the stopped answer",
            evidence,
            USAGE_ADVICE,
        )
    return stop_result.passed("Stop cancelled the upstream at once", evidence)


async def check_resume_stop(ctx: CheckContext) -> CheckResult:
    return judge_stop(await observe_stop(ctx))


@dataclass(frozen=True)
class Dropped:
    """``resume_grace``: the stream's id (None: no ``X-Stream-Id``), when the client dropped (the
    clock of the mock's records), the record's state PROBE_S after the drop, the record as it
    ended up (None: it never arrived), the usage log's lines for it (None: no log), and how
    long after the drop the upstream may stop (GRACE_S + SLACK_S, the slack stretched for the
    machine's ``Budget``)."""

    stream_id: str | None
    dropped_at: float
    state_at_probe: str | None
    record: Record | None
    usage_lines: tuple[Mapping[str, Any], ...] | None
    allowed_s: float = GRACE_S + SLACK_S


async def observe_grace(ctx: CheckContext) -> Dropped:
    limit = ctx.budget.stretch(FIRST_EVENTS_S)
    capture = await open_resumable(
        ctx, GRACE_SEED, GRACE_SCENARIO, drop_after=GRACE_DROP_AFTER, limit_s=limit
    )
    dropped_at = capture.started_at + capture.total_time
    await asyncio.sleep(max(0.0, dropped_at + PROBE_S - time.time()))
    probe = await ctx.record(GRACE_SEED)
    allowed = GRACE_S + ctx.budget.stretch(SLACK_S)
    watch_s = dropped_at + allowed + 2 * POLL_MARGIN_S - time.time()
    record = await ctx.record(GRACE_SEED, until=finished, wait_s=max(0.0, watch_s))
    ended = record is not None and finished(record)
    lines = None if record is None else await _usage_lines(ctx.usage_log, record["id"], ended)
    return Dropped(
        stream_id(capture),
        dropped_at,
        None if probe is None else probe.get("state"),
        record,
        lines,
        allowed,
    )


def judge_grace(observed: Dropped) -> CheckResult:
    """Pass: still generating PROBE_S after the drop, ``cancelled`` within ``allowed_s`` of it,
    and the usage log (if there is one) has one line for it, ``cancelled``."""
    record = observed.record
    if record is None:
        return grace_result.never_reached({})
    ended = record.get("ended_at") if finished(record) else None
    evidence: Evidence = {
        "upstream_state_at_probe": observed.state_at_probe,
        "probe_after_drop_ms": ms(PROBE_S),
        "upstream_state": record.get("state"),
        "upstream_stop_after_drop_ms": stop_after_hang_up_ms(record, observed.dropped_at),
        "allowed_after_drop_ms": ms(observed.allowed_s),
        "resume_grace_s": GRACE_S,
        "tokens_generated": record.get("tokens_generated"),
        **_usage_evidence(observed.usage_lines),
    }
    if observed.stream_id is None:
        return grace_result.failed(
            "the response had no X-Stream-Id header, so the stream was not resumable",
            evidence,
            NO_STREAM_ID_ADVICE,
        )
    if observed.state_at_probe != "running":
        return grace_result.failed(
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
        return grace_result.failed(verdict, evidence, GRACE_ADVICE)
    if _usage_problem(observed.usage_lines):
        return grace_result.failed(
            "the usage log does not have one cancelled line for the abandoned answer",
            evidence,
            USAGE_ADVICE,
        )
    return grace_result.passed(
        "a drop left the upstream generating, and the grace period with nobody back stopped it",
        evidence,
    )


async def check_resume_grace(ctx: CheckContext) -> CheckResult:
    return judge_grace(await observe_grace(ctx))
