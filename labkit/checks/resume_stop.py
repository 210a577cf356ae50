"""``resume_stop``: Stop cancels a resumable answer's upstream at once.

A resumable answer (``X-Resumable: true``) runs apart from its client's connection, so that a
client that drops can come back (``labkit.checks.resume``). That cuts both ways: a proxy whose
Stop (``POST /v1/streams/{id}/cancel``) only answers 200 leaves the model generating, and billed,
for a reader who said stop, until the grace period ends. (``resume_grace`` is the other way a
resumable answer ends: nobody back within the grace period.)

Experiment: a 20 s answer (400 tokens at 20 tokens/s), resumable; the client drops after
STOP_AFTER content events and at once sends Stop. The grader starts this check's proxy with
``RESUME_GRACE_S`` = GRACE_S (30 s, ``PROXY_ENV``), so a Stop that stops nothing is left running
for at least 30 s. Pass: Stop answered 200 saying ``cancelled``, the mock records the request
``cancelled`` within MAX_STOP_S (1 s) of Stop's answer, and the usage log holds one line for it,
``cancelled``. (The clock starts at the answer, not at the request: a grading machine too busy
to answer a request for a second, which has happened beside other gradings, is not a proxy that
stops late.) The reference stops within milliseconds; a Stop that stops nothing leaves the
upstream running the whole 20 s (the check watches it for WAIT_S, 2 s at one CPU).

``observe`` runs the experiment (``observe_stop``, which ``resume_replica`` runs with Stop sent
to another replica); ``judge`` decides, and is tested on constructed observations in process
(tests/checks/test_judges_resume_stop.py). The waits (the first events, Stop's answer, the
record, the usage line) stretch with the run's ``Budget``; MAX_STOP_S does not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from labkit.checks._hang_up import WAIT_S, stop_after_hang_up_ms, stopped_in_time
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
    "Stopped",
    "judge",
    "observe",
    "observe_stop",
]

ID = "resume_stop"
SUMMARY = "Stop cancels a resumable stream's upstream at once"
BUDGET_S = 16.0
MOCK_ONLY = "needs the mock's record of when a paced answer stopped"
SEED = 7511

GRACE_S = 30.0  # RESUME_GRACE_S for this check's proxy: far past any Stop's bound
PROXY_ENV = {"RESUME_GRACE_S": f"{GRACE_S:g}"}
SCENARIO = {"ttft_ms": 100, "tps": 20, "tokens": 400}
STOP_AFTER = 5  # content events read before Stop
STOP_ANSWER_S = 5.0  # for Stop's answer: a proxy answers it at once, a busy machine a bit later
FIRST_EVENTS_S = 5.0  # for the events before the drop (due within half a second)

STOP_ADVICE = (
    "on POST /v1/streams/{id}/cancel ask the log to stop the answer, and have its producer "
    "stop at once when asked (close relay's body, which closes the upstream), then answer 200."
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Stopped:
    """The stream's id (None: no ``X-Stream-Id``), when Stop was sent and when its answer came
    (the clock of the mock's records; None: no answer), Stop's status and body, the mock's
    record of the request as it ended up (None: it never arrived), the usage log's lines for it
    (None: no log), and the proxy's ``RESUME_GRACE_S`` (None: the grader did not choose it, as
    for ``resume_replica``'s replicas)."""

    stream_id: str | None
    stopped_at: float
    answered_at: float | None
    stop_status: int | None
    stop_body: Mapping[str, Any] | None
    record: Record | None
    usage_lines: tuple[Mapping[str, Any], ...] | None
    grace_s: float | None = GRACE_S


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


async def observe(ctx: CheckContext) -> Stopped:
    return await observe_stop(ctx)


async def observe_stop(
    ctx: CheckContext,
    *,
    seed: int = SEED,
    stop_at: str | None = None,
    grace_s: float | None = GRACE_S,
) -> Stopped:
    """The experiment, its request tagged ``seed``, Stop sent to the proxy at ``stop_at``
    (default: the one that took the request; another replica for ``resume_replica``, whose
    proxies run with a ``grace_s`` of their own)."""
    stretch = ctx.budget.stretch
    capture = await open_resumable(
        ctx, seed, SCENARIO, drop_after=STOP_AFTER, limit_s=stretch(FIRST_EVENTS_S)
    )
    stream = stream_id(capture)
    stopped_at = time.time()
    status, body = (
        (None, None) if stream is None else await _stop(ctx, stream, stop_at or ctx.proxy_url)
    )
    answered_at = None if status is None else time.time()
    record = await ctx.record(seed, until=finished, wait_s=stretch(WAIT_S))
    ended = record is not None and finished(record)
    lines = None
    if record is not None:
        wait_s = stretch(LOG_WAIT_S) if ended else 0.0
        lines = await usage_lines(ctx.usage_log, record["id"], wait_s)
    return Stopped(stream, stopped_at, answered_at, status, body, record, lines, grace_s)


def judge(observed: Stopped, budget: Budget) -> CheckResult:
    """Pass: Stop answered 200 ``cancelled``, the mock recorded the request ``cancelled`` within
    MAX_STOP_S of that answer (``budget`` does not move it), and the usage log (if there is
    one) has one line for it, ``cancelled``."""
    record = observed.record
    if record is None:
        return result.never_reached({})
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
        **usage_evidence(observed.usage_lines),
    }
    if observed.stream_id is None:
        return result.failed(
            "the response had no X-Stream-Id header, so there was no stream to stop",
            evidence,
            NO_STREAM_ID_ADVICE,
        )
    said_cancelled = observed.stop_body is not None and observed.stop_body.get("status") == (
        "cancelled"
    )
    if observed.stop_status != 200 or not said_cancelled:
        return result.failed(
            "the proxy did not answer Stop with the stream cancelled", evidence, STOP_ADVICE
        )
    if not stopped_in_time(record, observed.answered_at or observed.stopped_at):
        if record.get("state") in ("running", "completed"):
            verdict = "the upstream kept generating after Stop"
        else:
            verdict = "the upstream did not stop promptly after Stop"
        return result.failed(verdict, evidence, STOP_ADVICE)
    if usage_problem(observed.usage_lines):
        return result.failed(
            "the usage log does not have one cancelled line for the stopped answer",
            evidence,
            USAGE_ADVICE,
        )
    return result.passed("Stop cancelled the upstream at once", evidence)
