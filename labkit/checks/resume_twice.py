"""``resume_twice``: a resumable stream survives two drops, the second from the resumed
connection.

Experiment: ``resume``'s (``labkit.checks.resume``), on a longer answer (90 tokens at 40
tokens/s), with the first resumed connection dropped too, after DROP_AFTER more content events,
and resumed from its own last id. A proxy that numbers a resumed connection's events from 1 again
passes one resume and fails this one: the second cursor then means something else, and events
come twice.

Pass: as ``resume``'s (``resume.judge_drops``): ids of their own, numbered 1, 2, 3 ... across
all three connections; both resumes answered 200; the last connection ended with ``[DONE]``; the
content events put together equal the upstream's, one for one. Each connection is given up
after ``resume.LIMIT_S``, stretched with the run's ``Budget``. ``observe`` runs the connections;
``judge`` decides (tested in process: tests/checks/test_judges_resume.py).
"""

from __future__ import annotations

from labkit.checks import resume
from labkit.checks.context import CheckContext, Outcome
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.checks.resume import Observed, judge_drops, observe_drops

ID = "resume_twice"
STEP = resume.STEP
SUMMARY = "a resumable stream survives two drops, the second from the resumed connection"
BUDGET_S = 20.0
MOCK_ONLY = resume.MOCK_ONLY
SEED = 7502
SCENARIO = {**resume.SCENARIO, "tokens": 90}

result = Outcome(ID, STEP)


async def observe(ctx: CheckContext) -> Observed:
    return await observe_drops(ctx, SEED, SCENARIO, drops=2)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """``resume.judge_drops`` for this check (nothing timed: ``budget`` moves nothing)."""
    return judge_drops(observed, result)
