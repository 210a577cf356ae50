"""``cancel`` and ``cancel_before_first_token``: a client that leaves stops the upstream.

``cancel``: a 20 s generation (20 tokens/s); the client hangs up after 1.2 s. Pass: the mock
records the request as ``cancelled`` within MAX_STOP_S (1 s) of the hang-up. A proxy that
cancels needs a few ms, one token interval at most (tens of ms on half a CPU, a few hundred
for a proxy that blocks its event loop); one that does not leaves the upstream running for
another ~19 s.

``cancel_before_first_token``: the first token takes 1.5 s; the client hangs up after 0.4 s.
Pass: the mock records ``cancelled`` within MAX_STOP_S and never produced a token. The token
count is the robust half: a proxy that waits for the upstream's first byte before it returns
its response (outside the body, where Starlette does not watch for a disconnect) only notices
the hang-up at the first token, 1.1 s too late, so the upstream has made that token, whatever
the machine's speed. (Only if the proxy sends a heartbeat before the first token does the late
notice come earlier; then the time bound catches it.) The first token stays due before the
reference's first heartbeat (2 s) for that reason.

Both disconnect on a timer rather than after N tokens, so a buffering proxy is judged on
cancellation alone.

On a real engine (measured on two shared cores, docs/measurements.md), each runs alone on it and
reads its books:

``cancel``: 200 tokens asked (``ignore_eos``); the client hangs up once the engine's decoded
count has moved ENGINE_HANG_UP_DECODES times (the engine's own clock, so a buffering proxy is
judged on cancellation alone, at any speed). Pass: the engine has no request running within
MAX_STOP_S of the hang-up, having made fewer tokens than asked. A proxy that cancels leaves it
idle within one or two token steps (tens of ms) and a few tokens decoded after the hang-up; one
whose reader is detached lets it decode on at 15-50 tokens/s, 60 and more in the three seconds
watched, to the 200th.

``cancel_before_first_token``: the prompt is sized for a first token after about
ENGINE_FIRST_TOKEN_S (the engine's prompt speed is measured first: 40-170 tokens/s here, with
the grading engine reading it 32 tokens per step, the points where it can stop); the client hangs
up after 0.4 s. llama-server notices a closed connection during a prompt only after up to a
second of its own, so the proxy is timed where it acts, on its connection to the engine
(``labkit.checks.engine_sockets``). Pass: the proxy closed that connection within MAX_STOP_S of
the hang-up and the engine made no token. The reference closes it within milliseconds; a
proxy that waits for the first event closes it at its first heartbeat (1.6 s after the
hang-up) or at the first token; one that never closes it lets the engine read the prompt and
answer. A closed connection with a token made anyway means the engine read the prompt faster
than measured: inconclusive, never a fail. For an engine on another machine the sockets are not
visible, and the engine's idle time is judged with ENGINE_NOTICE_S more.

Each check is an ``observe_*`` coroutine that runs the experiment and returns what it saw (a
frozen dataclass), and a pure ``judge_*`` that holds every rule, so the rules are tested on
constructed observations in process (tests/grading/test_judges_cancel.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished, ms
from labkit.checks.engine_requests import OpenStream, engine_body, measure_prompt_rate
from labkit.checks.engine_sockets import EngineSockets
from labkit.checks.result import CheckResult
from mock_upstream.scenario import DEFAULT_TPS

STEP = "04_cancel_on_disconnect"
MAX_STOP_S = 1.0  # from the client's hang-up to the upstream's stop
WAIT_S = 2.0  # how long we watch the record after the hang-up

CANCEL_SEED = 4201
CANCEL_SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 400}
CANCEL_AFTER_S = 1.2

EARLY_SEED = 4301
EARLY_SCENARIO = {"ttft_ms": 1500, "tps": 20, "tokens": 20}
EARLY_AFTER_S = 0.4

ENGINE_CANCEL_TOKENS = 200
ENGINE_HANG_UP_DECODES = 10  # the decoded count moves once per token (and once per prompt step)
ENGINE_START_S = 20.0  # for the engine to start decoding a short prompt on a crowded machine
ENGINE_WATCH_S = 3.0  # how long the engine's books are watched after the hang-up
ENGINE_IDLE_WAIT_S = 30.0  # for the engine to finish what a broken proxy left running
ENGINE_FIRST_TOKEN_S = 4.0  # the prompt's size, in seconds of the engine's reading
ENGINE_EARLY_TOKENS = 8
ENGINE_NOTICE_S = 2.5  # without its sockets: the engine's own second, and the sparse reads

CANCEL_ADVICE = (
    "read the upstream inside the response body generator and close the upstream "
    "response when it is cancelled (async with, or aclose() in a finally block)."
)
EARLY_ADVICE = (
    "close the upstream when the body generator is cancelled, and do not wait for the "
    "upstream's first byte in the route function: read it inside the body generator, "
    "where Starlette notices the disconnect."
)

cancel_result = Outcome("cancel", STEP)
early_result = Outcome("cancel_before_first_token", STEP)


@dataclass(frozen=True)
class HungUp:
    """What one hang-up from the mock showed: when the client left (the clock of the mock's
    records) and the mock's record of the request as it ended up (None: it never arrived)."""

    hung_up_at: float
    record: Record | None


@dataclass(frozen=True)
class EngineNeverStarted:
    """``cancel`` on an engine that did not decode ENGINE_HANG_UP_DECODES times within
    ENGINE_START_S: the status the proxy answered, and what the engine's books moved."""

    status: int | None
    prompt_tokens: int
    decoded: int
    running: int


@dataclass(frozen=True)
class EngineStopped:
    """``cancel`` on an engine that had started: when it was idle again after the hang-up (None:
    still running ENGINE_WATCH_S later), the tokens it decoded before and after the hang-up, and
    all it predicted for the request."""

    stopped_after: float | None
    decoded_before_hangup: int
    decoded_after_hangup: int
    tokens_generated: int


@dataclass(frozen=True)
class EngineEarly:
    """``cancel_before_first_token`` on an engine: the prompt (its size, and when its first token
    was due by the rate measured just before), whether the proxy's sockets to the engine were
    watched, when the proxy closed them and when the engine was idle, both after the hang-up
    (None: not seen), and what the engine read and predicted."""

    status: int | None
    sentences: int
    first_token_due: float
    sockets_watched: bool
    closed_after: float | None
    idle_after: float | None
    prompt_tokens_read: int
    tokens_generated: int


async def _hang_up(
    ctx: CheckContext, seed: int, scenario: dict[str, int], after_s: float
) -> HungUp:
    """Stream, hang up after ``after_s``; return the hang-up time and the record as it ends up."""
    capture = await acapture_stream(
        ctx.chat_url, json=chat_body(seed, scenario), disconnect_after_s=after_s, timeout=10
    )
    hung_up_at = capture.started_at + capture.total_time
    record = await ctx.record(seed, until=finished, wait_s=WAIT_S)
    return HungUp(hung_up_at, record)


def tokens_after_hang_up(record: Record, hung_up_at: float) -> int:
    """Tokens the upstream generated after the client hung up, counted from the client's
    hang-up (not from when the upstream noticed a closed connection, which a gateway can delay):
    the mock's tokens come on a fixed clock (its first token, then one every 1/tps s), so the
    ones due by ``hung_up_at`` are known from its record."""
    generated = int(record.get("tokens_generated") or 0)
    first = record.get("first_token_at")
    if first is None or hung_up_at < first:
        return generated
    tps = float(record.get("scenario", {}).get("tps", DEFAULT_TPS))
    return max(0, generated - (1 + int((hung_up_at - first) * tps)))


def stop_after_hang_up_ms(record: Record, hung_up_at: float) -> int | None:
    """How long after the hang-up the upstream's record ended, in ms (None: not ended)."""
    stopped = record.get("ended_at") if finished(record) else None
    # clocks a millisecond apart can put the stop a hair before the hang-up: that is 0
    return None if stopped is None else max(0, ms(stopped - hung_up_at) or 0)


def _evidence(hung_up_at: float, record: Record) -> dict[str, int | str | None]:
    return {
        "upstream_state": record.get("state"),
        "upstream_stop_after_hangup_ms": stop_after_hang_up_ms(record, hung_up_at),
        "tokens_generated": record.get("tokens_generated"),
        "tokens_after_hang_up": tokens_after_hang_up(record, hung_up_at),
    }


def stopped_in_time(record: Record, hung_up_at: float) -> bool:
    """The record ended ``cancelled`` within MAX_STOP_S of the hang-up."""
    ended = record.get("ended_at")
    return (
        record.get("state") == "cancelled"
        and ended is not None
        and ended - hung_up_at <= MAX_STOP_S
    )


async def observe_cancel(ctx: CheckContext) -> HungUp:
    return await _hang_up(ctx, CANCEL_SEED, CANCEL_SCENARIO, CANCEL_AFTER_S)


def judge_cancel(observed: HungUp) -> CheckResult:
    """Pass: the mock recorded the request ``cancelled`` within MAX_STOP_S of the hang-up."""
    hung_up_at, record = observed.hung_up_at, observed.record
    if record is None:
        return cancel_result.never_reached({})
    evidence = _evidence(hung_up_at, record)
    if stopped_in_time(record, hung_up_at):
        return cancel_result.passed("the upstream stopped soon after the client left", evidence)
    if record.get("state") == "running":
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return cancel_result.failed(verdict, evidence, CANCEL_ADVICE)


async def check_cancel(ctx: CheckContext) -> CheckResult:
    return judge_cancel(await observe_cancel(ctx))


async def observe_cancel_before_first_token(ctx: CheckContext) -> HungUp:
    return await _hang_up(ctx, EARLY_SEED, EARLY_SCENARIO, EARLY_AFTER_S)


def judge_cancel_before_first_token(observed: HungUp) -> CheckResult:
    """Pass: the mock recorded ``cancelled`` within MAX_STOP_S of the hang-up, no token made."""
    hung_up_at, record = observed.hung_up_at, observed.record
    if record is None:
        return early_result.never_reached({})
    evidence = _evidence(hung_up_at, record)
    if stopped_in_time(record, hung_up_at) and not record.get("tokens_generated"):
        return early_result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if record.get("state") == "running" or record.get("tokens_generated"):
        verdict = "the upstream went on to its first token after the client had left"
    else:
        verdict = "the upstream did not stop promptly when the client left early"
    return early_result.failed(verdict, evidence, EARLY_ADVICE)


async def check_cancel_before_first_token(ctx: CheckContext) -> CheckResult:
    return judge_cancel_before_first_token(await observe_cancel_before_first_token(ctx))


async def observe_cancel_on_engine(ctx: CheckContext) -> EngineStopped | EngineNeverStarted:
    books = ctx.books
    body = engine_body(await books.model(), max_tokens=ENGINE_CANCEL_TOKENS)
    async with books.watch() as watch:
        before = watch.last
        stream = await OpenStream(ctx.chat_url, body).start()
        started = await watch.until(
            lambda now: now.decoded - before.decoded >= ENGINE_HANG_UP_DECODES, ENGINE_START_S
        )
        hung_up_at = await stream.hang_up()
        if started is None:
            seen = (await books.read()).since(before)
            return EngineNeverStarted(stream.status, seen.prompt, seen.decoded, seen.running)
        at_hang_up = watch.last
        idle = await watch.until(lambda now: now.running == 0, ENGINE_WATCH_S)
        seen = idle or watch.last
    done = await books.wait_idle(ENGINE_IDLE_WAIT_S) or await books.read()
    return EngineStopped(
        stopped_after=None if idle is None else idle.at - hung_up_at,
        decoded_before_hangup=at_hang_up.decoded - before.decoded,
        decoded_after_hangup=seen.decoded - at_hang_up.decoded,
        tokens_generated=done.since(before).predicted,
    )


def judge_cancel_on_engine(observed: EngineStopped | EngineNeverStarted) -> CheckResult:
    """Pass: the engine was idle within MAX_STOP_S of the hang-up, having made fewer tokens than
    asked. An engine that never started decoding: a fail if the request never reached it,
    inconclusive if it did (the machine was too slow)."""
    if isinstance(observed, EngineNeverStarted):
        return _never_started(observed)
    stopped_after = observed.stopped_after
    evidence = {
        "upstream_state": "stopped" if stopped_after is not None else "running",
        "upstream_stop_after_hangup_ms": ms(stopped_after),
        "tokens_decoded_before_hangup": observed.decoded_before_hangup,
        "tokens_decoded_after_hangup": observed.decoded_after_hangup,
        "tokens_generated": observed.tokens_generated,
        "tokens_asked": ENGINE_CANCEL_TOKENS,
    }
    if stopped_after is not None and stopped_after <= MAX_STOP_S:
        if observed.tokens_generated < ENGINE_CANCEL_TOKENS:
            return cancel_result.passed("the upstream stopped soon after the client left", evidence)
    if stopped_after is None:
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return cancel_result.failed(verdict, evidence, CANCEL_ADVICE)


async def check_cancel_on_engine(ctx: CheckContext) -> CheckResult:
    return judge_cancel_on_engine(await observe_cancel_on_engine(ctx))


def _never_started(observed: EngineNeverStarted) -> CheckResult:
    """The engine did not decode ENGINE_HANG_UP_DECODES times within ENGINE_START_S: the
    request never reached it (a fail), or the machine was too slow (inconclusive)."""
    evidence = {"status": observed.status, "engine_prompt_tokens": observed.prompt_tokens}
    if observed.running or observed.prompt_tokens or observed.decoded:
        return cancel_result.inconclusive(
            "inconclusive: the engine was too slow to start generating",
            f"it decoded {observed.decoded} times in {ENGINE_START_S:g} s",
            evidence,
        )
    return cancel_result.never_reached(evidence)


async def observe_cancel_before_first_token_on_engine(ctx: CheckContext) -> EngineEarly:
    books = ctx.books
    model = await books.model()
    rate = await measure_prompt_rate(ctx.upstream_url, model)
    sentences = rate.sentences_for(ENGINE_FIRST_TOKEN_S)
    body = engine_body(model, max_tokens=ENGINE_EARLY_TOKENS, sentences=sentences)
    sockets = EngineSockets.for_url(ctx.upstream_url)
    before = await books.read()
    stream = await OpenStream(ctx.chat_url, body).start()
    await asyncio.sleep(EARLY_AFTER_S)
    watched = sockets.open_ends() if sockets is not None else set()
    hung_up_at = await stream.hang_up()
    closed_at = None
    if sockets is not None and watched:
        closed_at = await sockets.closed_by_peer(watched, WAIT_S)
    after = await books.wait_idle(ENGINE_IDLE_WAIT_S)
    spent = (after or await books.read()).since(before)
    return EngineEarly(
        status=stream.status,
        sentences=sentences,
        first_token_due=rate.seconds_for(sentences),
        sockets_watched=sockets is not None and bool(watched),
        closed_after=None if closed_at is None else closed_at - hung_up_at,
        idle_after=None if after is None else after.at - hung_up_at,
        prompt_tokens_read=spent.prompt,
        tokens_generated=spent.predicted,
    )


def judge_cancel_before_first_token_on_engine(observed: EngineEarly) -> CheckResult:
    """Pass: the proxy closed its connection to the engine within MAX_STOP_S of the hang-up
    (without a view of the sockets: the engine was idle within MAX_STOP_S + ENGINE_NOTICE_S)
    and the engine made no token. Let go in time with a token made anyway: inconclusive."""
    closed_after, idle_after = observed.closed_after, observed.idle_after
    evidence: dict[str, int | str | None] = {
        "prompt_sentences": observed.sentences,
        "prompt_tokens_read": observed.prompt_tokens_read,  # before it stopped (cached included)
        "first_token_due_ms": ms(observed.first_token_due),
        "upstream_closed_after_hangup_ms": ms(closed_after),
        "upstream_idle_after_hangup_ms": ms(idle_after),
        "tokens_generated": observed.tokens_generated,
    }
    nothing_spent = observed.prompt_tokens_read == 0 and observed.tokens_generated == 0
    if nothing_spent and observed.status is None:
        return early_result.never_reached(evidence)
    if observed.sockets_watched:
        stopped = closed_after is not None and closed_after <= MAX_STOP_S
    else:  # no view of the sockets: the engine's idle time, with its own notice allowed
        evidence["judged_by"] = "engine idle time"
        stopped = idle_after is not None and idle_after <= MAX_STOP_S + ENGINE_NOTICE_S
    if stopped and observed.tokens_generated == 0:
        return early_result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if stopped:
        return early_result.inconclusive(
            "inconclusive: the engine made its first token before it noticed the hang-up",
            f"the proxy let go in time, but the engine read the whole prompt and made "
            f"{observed.tokens_generated} tokens: faster than the "
            f"{ms(observed.first_token_due)} ms measured just before",
            evidence,
            "grade again; on an engine of your own, let it stop within a prompt "
            "(llama-server --batch-size 32).",
        )
    if observed.tokens_generated or idle_after is None:
        verdict = "the upstream went on to its first token after the client had left"
    else:
        verdict = "the upstream did not stop promptly when the client left early"
    return early_result.failed(verdict, evidence, EARLY_ADVICE)


async def check_cancel_before_first_token_on_engine(ctx: CheckContext) -> CheckResult:
    return judge_cancel_before_first_token_on_engine(
        await observe_cancel_before_first_token_on_engine(ctx)
    )
