"""``resume_replica`` (profile ``gateway``): a resumable stream outlives the replica that took
it. Resumed on another replica it loses and repeats nothing; Stop sent to another replica stops
the upstream the first one runs.

Behind a load balancer, a client's resume and its Stop land on whichever replica the balancer
picks. A replay log kept in the proxy's own process (notebook 15's ``MemoryLog``) is seen by
that process alone: the other replica answers the resume with a 404, so does it the Stop, and
the answer runs on for nobody until its grace period ends. With ``REDIS_URL`` set the log lives
in Redis, so every replica reads every answer's events, and a Stop taken by any of them reaches
the producer that runs the answer.

Experiment: two replicas of the proxy, A (``ctx.proxy_url``) and B (``ctx.replica_url``), on
one Redis. ``labkit grade --profile gateway`` starts both, each with ``REDIS_URL`` set to a
private redis-server of the grader's (``labkit.grading.replicas``); graded by URL,
``--replica`` names B. Two experiments, side by side, each that of a step-15 check with the
second connection sent to B:

- ``resume``'s (``resume.observe_drops``): a stream of 60 tokens at 40 tokens/s asked of A,
  dropped after 15 content events, resumed on B with ``Last-Event-ID``, read to the end, and
  compared event by event with the same request sent straight to the mock
  (``integrity.compare``);
- ``resume_stop``'s (``resume_stop.observe_stop``): a 20 s answer asked of A, dropped after
  a few events, Stop sent to B at once.

Pass: B resumed the stream (200) with every event once and in order, numbered on from the
client's last id, to ``[DONE]`` (``resume``'s judge); B answered Stop 200 ``cancelled``, the
mock recorded A's upstream ``cancelled`` within ``MAX_STOP_S`` (1 s) of that answer, and the
usage log has one line for the answer, ``cancelled`` (``resume_stop``'s judge; the grader's two
replicas append to one usage log, so a line written by either counts; graded by URL there is
none to read). The replicas keep their own ``RESUME_GRACE_S`` (10 s in the reference): a Stop
that stops nothing leaves the upstream running past the 2 s the record is watched. A log in
process fails at once and whatever the machine: B answers both the resume and the Stop with a
404. Nothing is timed but the Stop, whose bound is ``resume_stop``'s.

``observe`` runs both experiments; ``judge`` decides (tested in process:
tests/checks/test_judges_resume_replica.py). Without a second replica (``ctx.replica_url``)
``observe`` sees nothing (``Unreplicated``) and the check is skipped, saying so. The waits are
``resume``'s and ``resume_stop``'s, stretched with the run's ``Budget``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from labkit.checks import resume, resume_stop
from labkit.checks.context import CheckContext, Outcome
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult, Evidence
from labkit.checks.resume import STEP, Observed, observe_drops
from labkit.checks.resume_stop import Stopped, observe_stop

__all__ = [
    "BUDGET_S",
    "ID",
    "MOCK_ONLY",
    "REPLICAS",
    "STEP",
    "SUMMARY",
    "Replicated",
    "Unreplicated",
    "judge",
    "observe",
]

ID = "resume_replica"
SUMMARY = "a stream resumes, and stops, on another replica than the one that took it"
BUDGET_S = 24.0  # resume's connections (8 s each, at most) beside Stop's watch
MOCK_ONLY = resume.MOCK_ONLY
REPLICAS = 2  # two copies of the proxy on one Redis
SEED, STOP_SEED = 7531, 7532

NO_REPLICA = "not run: needs a second replica of the proxy (grade-url's --replica)"
NO_REPLICA_ADVICE = (
    "graded by URL, name a second replica that shares the first's replay log with --replica "
    "URL; graded as a file, the grader starts two replicas on a Redis of its own."
)
NOT_SHARED = (
    "the other replica could not resume the stream: the replicas do not share the replay log"
)
STOP_NOT_SHARED = (
    "the other replica refused Stop: the replicas do not share the replay log, so nothing "
    "reached the replica that runs the answer"
)
SHARED_ADVICE = (
    "with REDIS_URL set keep the replay log in Redis (make_log's RedisLog), never in the "
    "process: every replica then reads every answer's events and takes its Stop."
)
PASSED = (
    "a stream resumed on another replica got every event once and in order, and Stop sent "
    "there cancelled the upstream at once"
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Replicated:
    """What the client saw: ``resumed``, the stream asked of A and resumed on B (``resume``'s
    observation), and ``stopped``, the answer asked of A and stopped on B (``resume_stop``'s)."""

    resumed: Observed
    stopped: Stopped


@dataclass(frozen=True)
class Unreplicated:
    """No second replica to send the resume and Stop to: nothing was run."""


async def observe(ctx: CheckContext) -> Replicated | Unreplicated:
    replica_url = ctx.replica_url
    if replica_url is None:
        return Unreplicated()
    resumed, stopped = await asyncio.gather(
        observe_drops(ctx, SEED, resume.SCENARIO, drops=1, resume_at=replica_url),
        observe_stop(ctx, seed=STOP_SEED, stop_at=replica_url, grace_s=None),
    )
    return Replicated(resumed, stopped)


def _refused_resume(observed: Observed) -> bool:
    """A's connection was sound (its stream id, ids on its events) and B refused the resume."""
    first, *resumed = observed.legs
    return (
        observed.stream_id is not None
        and first.status == 200
        and not first.ids_missing
        and bool(resumed)
        and resumed[0].status != 200
    )


def _refused_stop(observed: Stopped) -> bool:
    """B answered Stop for a stream A named, with an error status."""
    return (
        observed.stream_id is not None
        and observed.stop_status is not None
        and observed.stop_status != 200
    )


def judge(observed: Replicated | Unreplicated, budget: Budget) -> CheckResult:
    """Pass: ``resume``'s judge passes the stream resumed on B and ``resume_stop``'s the Stop
    sent to B. The verdict is the first failure's, in that order: B refusing the resume or
    the Stop (the log is not shared), or the step-15 check's own verdict. No second replica:
    skipped."""
    if isinstance(observed, Unreplicated):
        return result.skipped(NO_REPLICA, NO_REPLICA_ADVICE)
    resumed = resume.judge(observed.resumed, budget)
    stopped = resume_stop.judge(observed.stopped, budget)
    evidence: Evidence = {**resumed.evidence, **stopped.evidence}
    if observed.resumed.sent is not None and _refused_resume(observed.resumed):
        return result.failed(NOT_SHARED, evidence, SHARED_ADVICE)
    if not resumed.passed:
        return replace(resumed, id=ID, evidence=evidence)
    if observed.stopped.record is not None and _refused_stop(observed.stopped):
        return result.failed(STOP_NOT_SHARED, evidence, SHARED_ADVICE)
    if not stopped.passed:
        return replace(stopped, id=ID, evidence=evidence)
    return result.passed(PASSED, evidence)
