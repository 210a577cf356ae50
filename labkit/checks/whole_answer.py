"""``cancel_whole_answer``: a client that hangs up on a whole (non-streamed) answer stops it.

A unary request gets no byte until its answer is whole, so the proxy reads the upstream's body
in the route, before it returns a response: outside the response body, where Starlette watches
the client. A proxy that does nothing more lets the upstream generate the whole answer for a
client that left (LiteLLM #37140). The fix watches the client's ASGI ``receive`` while the body
is read, and closes the upstream request when it says ``http.disconnect``.

Experiment: a 20 s answer (400 tokens at 20 tokens/s), not streamed; the client hangs up after
HANG_UP_S. Pass: the mock records the request ``cancelled`` within MAX_STOP_S (1 s) of the
hang-up. A proxy that watches needs a few milliseconds (one token interval at most, 50 ms); one
that does not leaves the upstream generating for another 18 s, to the end of the answer.

On a real engine (``--engine``): llama.cpp's server notices a closed connection during a whole
answer by itself within about a second (FACTS: 48 decode steps after a direct client's
hang-up, then idle), so the proxy is timed where it acts, on its own connection to the engine
(``labkit.checks.engine_sockets``): it must close that connection within MAX_STOP_S of the
client's hang-up. Without a view of the sockets, the engine must be idle within MAX_STOP_S +
ENGINE_NOTICE_S.

``observe`` runs the experiment; ``judge`` decides, and is tested on constructed observations
in process (tests/checks/test_judges_whole_answer.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks._hang_up import (
    ENGINE_IDLE_WAIT_S,
    ENGINE_NOTICE_S,
    MAX_STOP_S,
    WAIT_S,
    stop_after_hang_up_ms,
    stopped_in_time,
)
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished, ms
from labkit.checks.engine_requests import OpenStream, engine_body
from labkit.checks.engine_sockets import EngineSockets
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "cancel_whole_answer"
STEP = "06_midstream_errors"
SUMMARY = "a disconnect during a whole (non-streamed) answer stops it"
SEED = 6601
TOKENS = 400
SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": TOKENS}
HANG_UP_S = 1.2
LIMIT_S = 60.0  # the client's read timeout, as it always was (it hangs up long before)
BUDGET_S = 8.0
ENGINE_TOKENS = 400
ENGINE_HANG_UP_DECODES = 10
ENGINE_START_S = 20.0
ENGINE_BUDGET_S = 60.0

ADVICE = (
    "watch the client while the route reads a whole answer (await the read and the client's "
    "http.disconnect together, as while_connected does), and close the upstream response "
    "when the client leaves first."
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """When the client hung up (the clock of the mock's records) and the mock's record of the
    request as it ended up (None: it never arrived)."""

    hung_up_at: float
    record: Record | None


async def observe(ctx: CheckContext) -> Observed:
    capture = await acapture_stream(
        ctx.chat_url,
        json=chat_body(SEED, SCENARIO, stream=False),
        disconnect_after_s=HANG_UP_S,
        timeout=ctx.budget.stretch(LIMIT_S),
    )
    hung_up_at = capture.started_at + capture.total_time
    record = await ctx.record(SEED, until=finished, wait_s=ctx.budget.stretch(WAIT_S))
    return Observed(hung_up_at, record)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the mock recorded the request ``cancelled`` within MAX_STOP_S of the hang-up
    (``budget`` does not move it)."""
    record = observed.record
    if record is None:
        return result.never_reached({})
    evidence = {
        "upstream_state": record.get("state"),
        "upstream_stop_after_hangup_ms": stop_after_hang_up_ms(record, observed.hung_up_at),
        "tokens_generated": record.get("tokens_generated"),
        "tokens_asked": TOKENS,
    }
    if stopped_in_time(record, observed.hung_up_at):
        return result.passed(
            "the upstream stopped the whole answer soon after the client left", evidence
        )
    if record.get("state") in ("running", "completed"):
        verdict = "the upstream generated the whole answer after the client had left"
    else:
        verdict = "the upstream did not stop the whole answer promptly when the client left"
    return result.failed(verdict, evidence, ADVICE)


@dataclass(frozen=True)
class EngineObserved:
    """On an engine: whether the engine started decoding the answer, whether the proxy's sockets
    to it were watched, when the proxy closed them and when the engine was idle (after the
    hang-up; None: not seen), and the tokens it decoded after the hang-up."""

    started: bool
    sockets_watched: bool
    closed_after: float | None
    idle_after: float | None
    decoded_after_hangup: int


async def observe_on_engine(ctx: CheckContext) -> EngineObserved:
    """The books are read often only until the hang-up: after it, only sparsely (``wait_idle``),
    because every read wakes the engine's waiting HTTP threads, and a whole answer's thread
    checks for a gone client only after a second without a wake-up (labkit.checks.engine_books)."""
    books, stretch = ctx.books, ctx.budget.stretch
    body = engine_body(await books.model(), max_tokens=ENGINE_TOKENS, stream=False)
    sockets = EngineSockets.for_url(ctx.upstream_url)
    async with books.watch() as watch:
        before = watch.last
        request = await OpenStream(ctx.chat_url, body).start()
        started = await watch.until(
            lambda now: now.decoded - before.decoded >= ENGINE_HANG_UP_DECODES,
            stretch(ENGINE_START_S),
        )
        at_hang_up = watch.last
    watched = sockets.open_ends() if sockets is not None else set()
    hung_up_at = await request.hang_up()
    closed_at = None
    if sockets is not None and watched:
        closed_at = await sockets.closed_by_peer(watched, stretch(WAIT_S))
    idle = await books.wait_idle(stretch(WAIT_S) + ENGINE_NOTICE_S)
    idle_at = time.time() if idle is not None else None
    seen = idle or await books.read()
    await books.wait_idle(stretch(ENGINE_IDLE_WAIT_S))
    return EngineObserved(
        started=started is not None,
        sockets_watched=sockets is not None and bool(watched),
        closed_after=None if closed_at is None else closed_at - hung_up_at,
        idle_after=None if idle_at is None else idle_at - hung_up_at,
        decoded_after_hangup=seen.decoded - at_hang_up.decoded,
    )


def judge_on_engine(observed: EngineObserved, budget: Budget) -> CheckResult:
    """Pass: the proxy closed its connection to the engine within MAX_STOP_S of the hang-up
    (without a view of the sockets: the engine was idle within MAX_STOP_S + ENGINE_NOTICE_S).
    An engine that never started decoding: inconclusive (the machine was too slow)."""
    evidence: dict[str, int | str | None] = {
        "upstream_closed_after_hangup_ms": ms(observed.closed_after),
        "upstream_idle_after_hangup_ms": ms(observed.idle_after),
        "tokens_decoded_after_hangup": observed.decoded_after_hangup,
        "tokens_asked": ENGINE_TOKENS,
    }
    if not observed.started:
        return result.inconclusive(
            "inconclusive: the engine was too slow to start generating",
            f"it did not decode {ENGINE_HANG_UP_DECODES} tokens in "
            f"{budget.stretch(ENGINE_START_S):g} s",
            evidence,
        )
    if observed.sockets_watched:
        stopped = observed.closed_after is not None and observed.closed_after <= MAX_STOP_S
    else:
        evidence["judged_by"] = "engine idle time"
        idle = observed.idle_after
        stopped = idle is not None and idle <= MAX_STOP_S + ENGINE_NOTICE_S
    if stopped:
        return result.passed(
            "the upstream stopped the whole answer soon after the client left", evidence
        )
    if (observed.closed_after if observed.sockets_watched else observed.idle_after) is not None:
        verdict = "the upstream did not stop the whole answer promptly when the client left"
    else:
        verdict = "the upstream generated the whole answer after the client had left"
    return result.failed(verdict, evidence, ADVICE)
