"""``cancel``: a client that leaves mid-stream stops the upstream.

Experiment: a 20 s generation (20 tokens/s); the client hangs up after 1.2 s. Pass: the mock
records the request as ``cancelled`` within MAX_STOP_S (1 s) of the hang-up. A proxy that
cancels needs a few ms, one token interval at most (tens of ms on half a CPU, a few hundred for
a proxy that blocks its event loop); one that does not leaves the upstream running for another
~19 s. It disconnects on a timer rather than after N tokens, so a buffering proxy is judged on
cancellation alone. (``cancel_before_first_token``, ``cancel_queued`` and
``cancel_whole_answer`` are the other windows of cancellation; they share the hang-up and its
bound, ``labkit.checks._hang_up``.)

On a real engine (measured on two shared cores, docs/measurements.md) it runs alone on it and
reads its books: 200 tokens asked (``ignore_eos``); the client hangs up once the engine's decoded
count has moved ENGINE_HANG_UP_DECODES times (the engine's own clock, so a buffering proxy is
judged on cancellation alone, at any speed). Pass: the engine has no request running within
MAX_STOP_S of the hang-up, having made fewer tokens than asked. A proxy that cancels leaves it
idle within one or two token steps (tens of ms) and a few tokens decoded after the hang-up; one
whose reader is detached lets it decode on at 15-50 tokens/s, 60 and more in the three seconds
watched, to the 200th.

``observe`` and ``observe_on_engine`` run the experiments and return what they saw (frozen
dataclasses); ``judge`` and ``judge_on_engine`` hold every rule, tested on constructed
observations in process (tests/checks/test_judges_cancel.py). The waits (the client's read, the
record's watch, the engine's start and idle) stretch with the run's ``Budget``; MAX_STOP_S does
not.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.checks._hang_up import (
    ENGINE_IDLE_WAIT_S,
    MAX_STOP_S,
    HungUp,
    hang_up,
    hang_up_evidence,
    stopped_in_time,
)
from labkit.checks.context import CheckContext, Outcome, ms
from labkit.checks.engine_requests import OpenStream, engine_body
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "cancel"
STEP = "04_cancel_on_disconnect"
SUMMARY = "a client disconnect stops the upstream promptly"
BUDGET_S = 8.0
ENGINE_BUDGET_S = 60.0

SEED = 4201
SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 400}
AFTER_S = 1.2

ENGINE_TOKENS = 200
ENGINE_HANG_UP_DECODES = 10  # the decoded count moves once per token (and once per prompt step)
ENGINE_START_S = 20.0  # for the engine to start decoding a short prompt on a crowded machine
ENGINE_WATCH_S = 3.0  # how long the engine's books are watched after the hang-up

ADVICE = (
    "read the upstream inside the response body generator and close the upstream "
    "response when it is cancelled (async with, or aclose() in a finally block)."
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class EngineNeverStarted:
    """On an engine that did not decode ENGINE_HANG_UP_DECODES times within ENGINE_START_S
    (stretched): the status the proxy answered, and what the engine's books moved."""

    status: int | None
    prompt_tokens: int
    decoded: int
    running: int


@dataclass(frozen=True)
class EngineStopped:
    """On an engine that had started: when it was idle again after the hang-up (None: still
    running ENGINE_WATCH_S later), the tokens it decoded before and after the hang-up, and all
    it predicted for the request."""

    stopped_after: float | None
    decoded_before_hangup: int
    decoded_after_hangup: int
    tokens_generated: int


async def observe(ctx: CheckContext) -> HungUp:
    return await hang_up(ctx, SEED, SCENARIO, AFTER_S)


def judge(observed: HungUp, budget: Budget) -> CheckResult:
    """Pass: the mock recorded the request ``cancelled`` within MAX_STOP_S of the hang-up
    (``budget`` does not move it)."""
    hung_up_at, record = observed.hung_up_at, observed.record
    if record is None:
        return result.never_reached({})
    evidence = hang_up_evidence(hung_up_at, record)
    if stopped_in_time(record, hung_up_at):
        return result.passed("the upstream stopped soon after the client left", evidence)
    if record.get("state") == "running":
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return result.failed(verdict, evidence, ADVICE)


async def observe_on_engine(ctx: CheckContext) -> EngineStopped | EngineNeverStarted:
    books = ctx.books
    body = engine_body(await books.model(), max_tokens=ENGINE_TOKENS)
    async with books.watch() as watch:
        before = watch.last
        stream = await OpenStream(ctx.chat_url, body).start()
        started = await watch.until(
            lambda now: now.decoded - before.decoded >= ENGINE_HANG_UP_DECODES,
            ctx.budget.stretch(ENGINE_START_S),
        )
        hung_up_at = await stream.hang_up()
        if started is None:
            seen = (await books.read()).since(before)
            return EngineNeverStarted(stream.status, seen.prompt, seen.decoded, seen.running)
        at_hang_up = watch.last
        idle = await watch.until(lambda now: now.running == 0, ctx.budget.stretch(ENGINE_WATCH_S))
        seen = idle or watch.last
    done = await books.wait_idle(ctx.budget.stretch(ENGINE_IDLE_WAIT_S)) or await books.read()
    return EngineStopped(
        stopped_after=None if idle is None else idle.at - hung_up_at,
        decoded_before_hangup=at_hang_up.decoded - before.decoded,
        decoded_after_hangup=seen.decoded - at_hang_up.decoded,
        tokens_generated=done.since(before).predicted,
    )


def judge_on_engine(observed: EngineStopped | EngineNeverStarted, budget: Budget) -> CheckResult:
    """Pass: the engine was idle within MAX_STOP_S of the hang-up, having made fewer tokens than
    asked. An engine that never started decoding: a fail if the request never reached it,
    inconclusive if it did (the machine was too slow)."""
    if isinstance(observed, EngineNeverStarted):
        return _never_started(observed, budget)
    stopped_after = observed.stopped_after
    evidence = {
        "upstream_state": "stopped" if stopped_after is not None else "running",
        "upstream_stop_after_hangup_ms": ms(stopped_after),
        "tokens_decoded_before_hangup": observed.decoded_before_hangup,
        "tokens_decoded_after_hangup": observed.decoded_after_hangup,
        "tokens_generated": observed.tokens_generated,
        "tokens_asked": ENGINE_TOKENS,
    }
    if stopped_after is not None and stopped_after <= MAX_STOP_S:
        if observed.tokens_generated < ENGINE_TOKENS:
            return result.passed("the upstream stopped soon after the client left", evidence)
    if stopped_after is None:
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return result.failed(verdict, evidence, ADVICE)


def _never_started(observed: EngineNeverStarted, budget: Budget) -> CheckResult:
    """The engine did not decode ENGINE_HANG_UP_DECODES times within ENGINE_START_S (stretched
    for ``budget``): the request never reached it (a fail), or the machine was too slow
    (inconclusive)."""
    evidence = {"status": observed.status, "engine_prompt_tokens": observed.prompt_tokens}
    if observed.running or observed.prompt_tokens or observed.decoded:
        return result.inconclusive(
            "inconclusive: the engine was too slow to start generating",
            f"it decoded {observed.decoded} times in {budget.stretch(ENGINE_START_S):g} s",
            evidence,
        )
    return result.never_reached(evidence)
