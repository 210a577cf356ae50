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
"""

from __future__ import annotations

import asyncio

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished, ms
from labkit.checks.engine_books import Books
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


async def _hang_up(
    ctx: CheckContext, seed: int, scenario: dict[str, int], after_s: float
) -> tuple[float, Record | None]:
    """Stream, hang up after ``after_s``; return the hang-up time and the record as it ends up."""
    capture = await acapture_stream(
        ctx.chat_url, json=chat_body(seed, scenario), disconnect_after_s=after_s, timeout=10
    )
    hung_up_at = capture.started_at + capture.total_time
    record = await ctx.record(seed, until=finished, wait_s=WAIT_S)
    return hung_up_at, record


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


def _evidence(hung_up_at: float, record: Record) -> dict[str, int | str | None]:
    stopped = record.get("ended_at") if record.get("state") != "running" else None
    return {
        "upstream_state": record.get("state"),
        # clocks a millisecond apart can put the stop a hair before the hang-up: that is 0
        "upstream_stop_after_hangup_ms": None
        if stopped is None
        else max(0, ms(stopped - hung_up_at) or 0),
        "tokens_generated": record.get("tokens_generated"),
        "tokens_after_hang_up": tokens_after_hang_up(record, hung_up_at),
    }


def _stopped_in_time(record: Record, hung_up_at: float) -> bool:
    ended = record.get("ended_at")
    return (
        record.get("state") == "cancelled"
        and ended is not None
        and ended - hung_up_at <= MAX_STOP_S
    )


async def check_cancel(ctx: CheckContext) -> CheckResult:
    hung_up_at, record = await _hang_up(ctx, CANCEL_SEED, CANCEL_SCENARIO, CANCEL_AFTER_S)
    if record is None:
        return cancel_result.failed(
            "the request never reached the upstream",
            {},
            "forward POST /v1/chat/completions to the upstream with its JSON body.",
            step="02_forwarding_proxy",
        )
    evidence = _evidence(hung_up_at, record)
    if _stopped_in_time(record, hung_up_at):
        return cancel_result.passed("the upstream stopped soon after the client left", evidence)
    if record.get("state") == "running":
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return cancel_result.failed(verdict, evidence, CANCEL_ADVICE)


async def check_cancel_before_first_token(ctx: CheckContext) -> CheckResult:
    hung_up_at, record = await _hang_up(ctx, EARLY_SEED, EARLY_SCENARIO, EARLY_AFTER_S)
    if record is None:
        return early_result.failed(
            "the request never reached the upstream",
            {},
            "forward POST /v1/chat/completions to the upstream with its JSON body.",
            step="02_forwarding_proxy",
        )
    evidence = _evidence(hung_up_at, record)
    if _stopped_in_time(record, hung_up_at) and not record.get("tokens_generated"):
        return early_result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if record.get("state") == "running" or record.get("tokens_generated"):
        verdict = "the upstream went on to its first token after the client had left"
    else:
        verdict = "the upstream did not stop promptly when the client left early"
    return early_result.failed(verdict, evidence, EARLY_ADVICE)


async def check_cancel_on_engine(ctx: CheckContext) -> CheckResult:
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
            return await _never_started(ctx, before, stream)
        at_hang_up = watch.last
        idle = await watch.until(lambda now: now.running == 0, ENGINE_WATCH_S)
        seen = idle or watch.last
    done = await books.wait_idle(ENGINE_IDLE_WAIT_S) or await books.read()
    spent = done.since(before)
    stopped_after = None if idle is None else idle.at - hung_up_at
    evidence = {
        "upstream_state": "stopped" if idle is not None else "running",
        "upstream_stop_after_hangup_ms": ms(stopped_after),
        "tokens_decoded_before_hangup": at_hang_up.decoded - before.decoded,
        "tokens_decoded_after_hangup": seen.decoded - at_hang_up.decoded,
        "tokens_generated": spent.predicted,
        "tokens_asked": ENGINE_CANCEL_TOKENS,
    }
    if stopped_after is not None and stopped_after <= MAX_STOP_S:
        if spent.predicted < ENGINE_CANCEL_TOKENS:
            return cancel_result.passed("the upstream stopped soon after the client left", evidence)
    if idle is None:
        verdict = "the upstream kept generating after the client left"
    else:
        verdict = "the upstream did not stop promptly when the client left"
    return cancel_result.failed(verdict, evidence, CANCEL_ADVICE)


async def _never_started(ctx: CheckContext, before: Books, stream: OpenStream) -> CheckResult:
    """The engine did not decode ENGINE_HANG_UP_DECODES times within ENGINE_START_S: the
    request never reached it (a fail), or the machine was too slow (inconclusive)."""
    seen = (await ctx.books.read()).since(before)
    evidence = {"status": stream.status, "engine_prompt_tokens": seen.prompt}
    if seen.running or seen.prompt or seen.decoded:
        return cancel_result.inconclusive(
            "inconclusive: the engine was too slow to start generating",
            f"it decoded {seen.decoded} times in {ENGINE_START_S:g} s",
            evidence,
        )
    return cancel_result.failed(
        "the request never reached the upstream",
        evidence,
        "forward POST /v1/chat/completions to the upstream with its JSON body.",
        step="02_forwarding_proxy",
    )


async def check_cancel_before_first_token_on_engine(ctx: CheckContext) -> CheckResult:
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
    closed_after = None if closed_at is None else closed_at - hung_up_at
    idle_after = None if after is None else after.at - hung_up_at
    evidence: dict[str, int | str | None] = {
        "prompt_sentences": sentences,
        "prompt_tokens_read": spent.prompt,  # before it stopped (cached ones included)
        "first_token_due_ms": ms(rate.seconds_for(sentences)),
        "upstream_closed_after_hangup_ms": ms(closed_after),
        "upstream_idle_after_hangup_ms": ms(idle_after),
        "tokens_generated": spent.predicted,
    }
    if spent.prompt == 0 and spent.predicted == 0 and stream.status is None:
        return early_result.failed(
            "the request never reached the upstream",
            evidence,
            "forward POST /v1/chat/completions to the upstream with its JSON body.",
            step="02_forwarding_proxy",
        )
    if sockets is not None and watched:
        stopped = closed_after is not None and closed_after <= MAX_STOP_S
    else:  # no view of the sockets: the engine's idle time, with its own notice allowed
        evidence["judged_by"] = "engine idle time"
        stopped = idle_after is not None and idle_after <= MAX_STOP_S + ENGINE_NOTICE_S
    if stopped and spent.predicted == 0:
        return early_result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if stopped:
        return early_result.inconclusive(
            "inconclusive: the engine made its first token before it noticed the hang-up",
            f"the proxy let go in time, but the engine read the whole prompt and made "
            f"{spent.predicted} tokens: faster than the {ms(rate.seconds_for(sentences))} ms "
            "measured just before",
            evidence,
            "grade again; on an engine of your own, let it stop within a prompt "
            "(llama-server --batch-size 32).",
        )
    if spent.predicted or after is None:
        verdict = "the upstream went on to its first token after the client had left"
    else:
        verdict = "the upstream did not stop promptly when the client left early"
    return early_result.failed(verdict, evidence, EARLY_ADVICE)
