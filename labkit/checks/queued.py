"""``cancel_queued``: a client that hangs up while its request waits in the engine's queue
lets the engine drop it.

An engine whose slots are all busy sends no response headers until one frees (llama.cpp and
vLLM alike). The proxy's route then waits in ``client.send`` for those headers, outside the
response body, where Starlette does not watch the client. A proxy that does nothing more keeps
the queued request open after its client left: the engine starts it when a slot frees and
spends a prefill, at least, on nobody (LiteLLM #31499). vLLM drops a waiting request whose
connection closed; so does the mock. The fix watches the client's ASGI ``receive`` while the
route waits, and closes the upstream request when it says ``http.disconnect``.

Experiment, on the mock with one slot (``slots: 1``): a first request, sent straight to the
mock, holds the slot for OCCUPY_S (4 s); a second one, through the proxy, waits behind it, and
its client hangs up after HANG_UP_S (0.8 s), before any header. Pass: the mock drops the waiting
request (``cancelled``, never admitted to a slot) within MAX_STOP_S (1 s) of the hang-up. A
proxy that watches needs milliseconds; one that does not keeps it queued until the slot frees,
about three seconds later, and the mock then starts it.

On a real engine (``--engine``): every slot is filled with a long answer sent straight to the
engine, and the probe waits behind them. llama.cpp does not drop a waiting request whose client
left (it reads its prompt once a slot frees, and notices at its first write), so its books
cannot tell a proxy that let go from one that did not; the proxy is timed where it acts, on its
own connection to the engine (``labkit.checks.engine_sockets``): it must close it within
MAX_STOP_S of the client's hang-up. Without a view of the sockets (an engine elsewhere) the
result is inconclusive.

``observe`` runs the experiment; ``judge`` decides, and is tested on constructed observations
in process (tests/checks/test_judges_queued.py); ``observe_on_engine`` and ``judge_on_engine``
the same on an engine. Every wait (for the slot to be held, the record to settle, the engine's
slots and sockets) stretches with the run's ``Budget``; MAX_STOP_S does not.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from labkit.capture import acapture_stream
from labkit.checks._hang_up import MAX_STOP_S, WAIT_S, stop_after_hang_up_ms, stopped_in_time
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished, ms
from labkit.checks.engine_requests import OpenStream, engine_body
from labkit.checks.engine_sockets import EngineSockets
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "cancel_queued"
STEP = "04_cancel_on_disconnect"
SUMMARY = "a disconnect while the request waits in the upstream's queue lets it drop the request"
OCCUPIER_SEED, SEED = 6301, 6302
OCCUPY_S = 4.0
OCCUPIER = {"slots": 1, "ttft_ms": 100, "tps": 20, "tokens": int(OCCUPY_S * 20)}
WAITING = {"slots": 1, "ttft_ms": 200, "tps": 20, "tokens": 20}
HANG_UP_S = 0.8
ADMIT_WAIT_S = 5.0  # for the occupier to hold its slot, on a slow machine
SETTLE_S = 6.0  # the record is watched this long after the hang-up (past the slot's freeing)
LIMIT_S = 60.0  # the probe's read timeout, as it always was (it hangs up long before)
SLOTS_LIMIT_S = 10.0  # for the engine's /slots
BUDGET_S = 16.0
ENGINE_OCCUPY_TOKENS = 400
ENGINE_PROBE_TOKENS = 8
ENGINE_START_S = 20.0
ENGINE_IDLE_WAIT_S = 30.0
ENGINE_BUDGET_S = 60.0

ADVICE = (
    "watch the client while the route waits for the upstream's headers (await them and the "
    "client's http.disconnect together, as while_connected does), and close the upstream "
    "request when the client leaves first."
)

result = Outcome(ID, STEP)


def admitted(record: Record) -> bool:
    return record.get("state") != "queued"


@dataclass(frozen=True)
class Observed:
    """Whether the occupier held the slot before the probe was sent, when the probe's client
    hung up (the clock of the mock's records), and the mock's record of the probe as it ended
    up (None: it never arrived)."""

    slot_held: bool
    hung_up_at: float
    record: Record | None


async def observe(ctx: CheckContext) -> Observed:
    occupier = await OpenStream(
        f"{ctx.upstream_url}/v1/chat/completions", chat_body(OCCUPIER_SEED, OCCUPIER)
    ).start()
    stretch = ctx.budget.stretch
    try:
        held = await ctx.record(OCCUPIER_SEED, until=admitted, wait_s=stretch(ADMIT_WAIT_S))
        capture = await acapture_stream(
            ctx.chat_url,
            json=chat_body(SEED, WAITING),
            disconnect_after_s=HANG_UP_S,
            timeout=stretch(LIMIT_S),
        )
        hung_up_at = capture.started_at + capture.total_time
        record = await ctx.record(SEED, until=finished, wait_s=stretch(SETTLE_S))
    finally:
        await occupier.hang_up()
    slot_held = held is not None and held.get("state") == "running"
    return Observed(slot_held, hung_up_at, record)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the mock dropped the waiting request (``cancelled``, never admitted) within
    MAX_STOP_S of the hang-up (``budget`` does not move it). An occupier that never held the
    slot: inconclusive."""
    record = observed.record
    if record is None:
        return result.never_reached({})
    evidence = {
        "upstream_state": record.get("state"),
        "upstream_stop_after_hangup_ms": stop_after_hang_up_ms(record, observed.hung_up_at),
        "admitted_to_a_slot": record.get("admitted_at") is not None,
        "tokens_generated": record.get("tokens_generated"),
        "slot_busy_for_ms": ms(OCCUPY_S),
    }
    never_admitted = record.get("admitted_at") is None
    if never_admitted and stopped_in_time(record, observed.hung_up_at):
        return result.passed(
            "the upstream dropped the queued request soon after the client left", evidence
        )
    if not observed.slot_held and record.get("queued_at") is None:
        return result.inconclusive(
            "inconclusive: the upstream's one slot was not busy, so nothing queued",
            "the request that should have held the slot had not started when the probe was sent",
            evidence,
        )
    if record.get("admitted_at") is not None:
        verdict = "the upstream started the queued request after its client had left"
    else:
        verdict = "the upstream kept the queued request waiting after its client had left"
    return result.failed(verdict, evidence, ADVICE)


@dataclass(frozen=True)
class EngineObserved:
    """On an engine: whether every slot was busy when the probe was sent, whether the proxy's
    connection to the engine was seen, and when the proxy closed it after the hang-up (None:
    not within WAIT_S)."""

    slots_busy: bool
    sockets_watched: bool
    closed_after: float | None


async def observe_on_engine(ctx: CheckContext) -> EngineObserved:
    books = ctx.books
    model = await books.model()
    engine_chat = f"{ctx.upstream_url}/v1/chat/completions"
    stretch = ctx.budget.stretch
    async with httpx.AsyncClient(timeout=stretch(SLOTS_LIMIT_S)) as client:
        slots = len((await client.get(f"{ctx.upstream_url}/slots")).json())
    sockets = EngineSockets.for_url(ctx.upstream_url)
    occupiers = [
        await OpenStream(engine_chat, engine_body(model, max_tokens=ENGINE_OCCUPY_TOKENS)).start()
        for _ in range(slots)
    ]
    try:
        async with books.watch() as watch:
            busy = await watch.until(lambda now: now.running >= slots, stretch(ENGINE_START_S))
        before = sockets.open_ends() if sockets is not None else set()
        probe_body = engine_body(model, max_tokens=ENGINE_PROBE_TOKENS)
        probe = await OpenStream(ctx.chat_url, probe_body).start()
        await asyncio.sleep(HANG_UP_S)
        proxy_ends = (sockets.open_ends() - before) if sockets is not None else set()
        hung_up_at = await probe.hang_up()
        closed_at = None
        if sockets is not None and proxy_ends:
            closed_at = await sockets.closed_by_peer(proxy_ends, stretch(WAIT_S))
    finally:
        for occupier in occupiers:
            await occupier.hang_up()
    await books.wait_idle(stretch(ENGINE_IDLE_WAIT_S))
    return EngineObserved(
        slots_busy=busy is not None,
        sockets_watched=bool(proxy_ends),
        closed_after=None if closed_at is None else closed_at - hung_up_at,
    )


def judge_on_engine(observed: EngineObserved, budget: Budget) -> CheckResult:
    """Pass: the proxy closed its connection to the engine within MAX_STOP_S of the hang-up. Slots
    not all busy, or the proxy's connection not seen: inconclusive."""
    evidence: dict[str, int | str | bool | None] = {
        "engine_slots_busy": observed.slots_busy,
        "upstream_closed_after_hangup_ms": ms(observed.closed_after),
    }
    if not observed.slots_busy:
        return result.inconclusive(
            "inconclusive: the engine's slots were not all busy, so nothing queued",
            "the long answers sent to fill them had not all started within "
            f"{budget.stretch(ENGINE_START_S):g} s",
            evidence,
        )
    if not observed.sockets_watched:
        return result.inconclusive(
            "inconclusive: the proxy's connection to the engine could not be watched",
            "llama.cpp reads a queued prompt whether or not its client left, so only the "
            "proxy's own connection tells; it is visible only for an engine on this machine",
            evidence,
        )
    closed = observed.closed_after
    if closed is not None and closed <= MAX_STOP_S:
        return result.passed(
            "the proxy let go of the queued request soon after the client left", evidence
        )
    return result.failed(
        "the proxy kept the queued request waiting after its client had left",
        evidence,
        ADVICE,
    )
