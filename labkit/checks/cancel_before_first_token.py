"""``cancel_before_first_token``: a client that leaves while it waits for the first token stops
the upstream too.

Experiment: the first token takes 1.5 s; the client hangs up after 0.4 s. Pass: the mock records
``cancelled`` within MAX_STOP_S (1 s) and never produced a token. The token count is the robust
half: a proxy that waits for the upstream's first byte before it returns its response (outside
the body, where Starlette does not watch for a disconnect) only notices the hang-up at the first
token, 1.1 s too late, so the upstream has made that token, whatever the machine's speed. (Only
if the proxy sends a heartbeat before the first token does the late notice come earlier; then
the time bound catches it.) The first token stays due before the reference's first heartbeat
(2 s) for that reason. It disconnects on a timer rather than after N tokens, so a buffering
proxy is judged on cancellation alone.

On a real engine (measured on two shared cores, docs/measurements.md) it runs alone on it and
reads its books. The prompt is sized for a first token after about ENGINE_FIRST_TOKEN_S (the
engine's prompt speed is measured first: 40-170 tokens/s here, with the grading engine reading
it 32 tokens per step, the points where it can stop); the client hangs up after 0.4 s.
llama-server notices a closed connection during a prompt only after up to a second of its own,
so the proxy is timed where it acts, on its connection to the engine
(``labkit.checks.engine_sockets``). Pass: the proxy closed that connection within MAX_STOP_S of
the hang-up and the engine made no token. The reference closes it within milliseconds; a proxy
that waits for the first event closes it at its first heartbeat (1.6 s after the hang-up) or at
the first token; one that never closes it lets the engine read the prompt and answer. A closed
connection with a token made anyway means the engine read the prompt faster than measured:
inconclusive, never a fail. For an engine on another machine the sockets are not visible, and
the engine's idle time is judged with ENGINE_NOTICE_S more.

``observe`` and ``observe_on_engine`` run the experiments and return what they saw; ``judge``
and ``judge_on_engine`` hold every rule, tested on constructed observations in process
(tests/checks/test_judges_cancel.py, beside ``cancel``'s). The waits (the client's read, the
record's watch, the engine's) stretch with the run's ``Budget``; MAX_STOP_S does not.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from labkit.checks._hang_up import (
    ENGINE_IDLE_WAIT_S,
    ENGINE_NOTICE_S,
    MAX_STOP_S,
    WAIT_S,
    HungUp,
    hang_up,
    hang_up_evidence,
    stopped_in_time,
)
from labkit.checks.context import CheckContext, Outcome, ms
from labkit.checks.engine_requests import OpenStream, engine_body, measure_prompt_rate
from labkit.checks.engine_sockets import EngineSockets
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "cancel_before_first_token"
STEP = "04_cancel_on_disconnect"
SUMMARY = "a disconnect while waiting for the first token also stops it"
BUDGET_S = 6.0
ENGINE_BUDGET_S = 60.0

SEED = 4301
SCENARIO = {"ttft_ms": 1500, "tps": 20, "tokens": 20}
AFTER_S = 0.4

ENGINE_FIRST_TOKEN_S = 4.0  # the prompt's size, in seconds of the engine's reading
ENGINE_TOKENS = 8

ADVICE = (
    "close the upstream when the body generator is cancelled, and do not wait for the "
    "upstream's first byte in the route function: read it inside the body generator, "
    "where Starlette notices the disconnect."
)

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class EngineObserved:
    """On an engine: the prompt (its size, and when its first token was due by the rate measured
    just before), whether the proxy's sockets to the engine were watched, when the proxy closed
    them and when the engine was idle, both after the hang-up (None: not seen), and what the
    engine read and predicted."""

    status: int | None
    sentences: int
    first_token_due: float
    sockets_watched: bool
    closed_after: float | None
    idle_after: float | None
    prompt_tokens_read: int
    tokens_generated: int


async def observe(ctx: CheckContext) -> HungUp:
    return await hang_up(ctx, SEED, SCENARIO, AFTER_S)


def judge(observed: HungUp, budget: Budget) -> CheckResult:
    """Pass: the mock recorded ``cancelled`` within MAX_STOP_S of the hang-up, no token made
    (``budget`` moves neither)."""
    hung_up_at, record = observed.hung_up_at, observed.record
    if record is None:
        return result.never_reached({})
    evidence = hang_up_evidence(hung_up_at, record)
    if stopped_in_time(record, hung_up_at) and not record.get("tokens_generated"):
        return result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if record.get("state") == "running" or record.get("tokens_generated"):
        verdict = "the upstream went on to its first token after the client had left"
    else:
        verdict = "the upstream did not stop promptly when the client left early"
    return result.failed(verdict, evidence, ADVICE)


async def observe_on_engine(ctx: CheckContext) -> EngineObserved:
    books = ctx.books
    model = await books.model()
    rate = await measure_prompt_rate(ctx.upstream_url, model)
    sentences = rate.sentences_for(ENGINE_FIRST_TOKEN_S)
    body = engine_body(model, max_tokens=ENGINE_TOKENS, sentences=sentences)
    sockets = EngineSockets.for_url(ctx.upstream_url)
    before = await books.read()
    stream = await OpenStream(ctx.chat_url, body).start()
    await asyncio.sleep(AFTER_S)
    watched = sockets.open_ends() if sockets is not None else set()
    hung_up_at = await stream.hang_up()
    closed_at = None
    if sockets is not None and watched:
        closed_at = await sockets.closed_by_peer(watched, ctx.budget.stretch(WAIT_S))
    after = await books.wait_idle(ctx.budget.stretch(ENGINE_IDLE_WAIT_S))
    spent = (after or await books.read()).since(before)
    return EngineObserved(
        status=stream.status,
        sentences=sentences,
        first_token_due=rate.seconds_for(sentences),
        sockets_watched=sockets is not None and bool(watched),
        closed_after=None if closed_at is None else closed_at - hung_up_at,
        idle_after=None if after is None else after.at - hung_up_at,
        prompt_tokens_read=spent.prompt,
        tokens_generated=spent.predicted,
    )


def judge_on_engine(observed: EngineObserved, budget: Budget) -> CheckResult:
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
        return result.never_reached(evidence)
    if observed.sockets_watched:
        stopped = closed_after is not None and closed_after <= MAX_STOP_S
    else:  # no view of the sockets: the engine's idle time, with its own notice allowed
        evidence["judged_by"] = "engine idle time"
        stopped = idle_after is not None and idle_after <= MAX_STOP_S + ENGINE_NOTICE_S
    if stopped and observed.tokens_generated == 0:
        return result.passed(
            "the upstream stopped before its first token when the client left", evidence
        )
    if stopped:
        return result.inconclusive(
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
    return result.failed(verdict, evidence, ADVICE)
