"""``concurrency``: many streams at once all get through, and the event loop is never blocked.

Experiment: first a few calibration probes (``GET /v1/models``, one after another) on the idle
proxy, to see how fast this machine answers at all. Then STREAMS (110) streams start,
each with a 3 s first token (TTFT_S) and then tokens at 2 a second (TPS) until it has lasted
STREAM_S (5 s: 4 tokens), stretched by the run's ``Budget`` on a slower machine (10 s at half a
CPU), while the probe asks again every 0.1 s and times each answer. The streams start evenly over
two seconds (ARRIVE_OVER_S), so they are all open at once from then on, and the proxy is not
asked to accept all STREAMS connections in the same instant (at half a CPU, that many in one
second keep even a correct proxy's event loop busy past the probe limit: docs/measurements.md,
"Why concurrency's thresholds"). Any answer counts (a 404 too): a probe only measures whether
the proxy's event loop is free to answer at all.

Two ways a proxy makes streams wait, and what tells each apart:

- **Its upstream pool is smaller than the streams it carries.** Every open stream holds one
  upstream connection for its whole life, and httpx's default pool (like aiohttp's) has 100: the
  101st stream waits in the pool until a stream ends and gives its connection back. The mock's
  records show it without any clock: a stream that reached the upstream only after another
  stream of the burst had ended there waited for a connection (``reached_upstream_late`` counts
  them, ``reached_upstream_together`` the others; a request that never reached the upstream is
  in neither). Through a big enough pool all STREAMS reach it within the
  ARRIVE_OVER_S they are sent over (a little later on a slow machine), while the first stream
  ends 5 s after it arrived; through a 100-connection pool 10 of them arrive only after the first
  streams end. The waiting streams
  still complete, late (a pool timeout longer than a stream lets them), so counting completed
  streams would not show it.
- **Its event loop blocks.** An async proxy runs the streams side by side and answers every
  probe in milliseconds; only while the requests arrive together is it busy, for a fraction of
  a second (a few hundred ms at half a CPU). A proxy that blocks its event loop while it waits
  on the upstream (a sync HTTP client, ``time.sleep``, blocking I/O) cannot answer anything
  during that wait: a probe sent while it waits for a first token waits for it too, close to
  TTFT_S. The threshold is relative to that wait, not to the machine's speed: a probe slower
  than half of TTFT_S (MAX_PROBE_S) means the loop was blocked. Correct and broken land about
  ten times apart, and a slow machine moves only the correct proxy's few hundred ms. A blocked
  loop also lets few streams reach the upstream together; its verdict names the block.

Pass: every stream ends with ``data: [DONE]`` within DEADLINE_S (nearly twice what the streams
need), every one reached the upstream before any of them had ended there, and no probe took
longer than MAX_PROBE_S.

A second attempt (after an inconclusive first) meets the proxy's pool full of the first
attempt's idle connections, and httpcore 1.0.9 hands one idle connection to every request
queued at that moment, then sends all but one back to queue, again and again (the pool's storm,
docs/known-limits.md): at load a correct proxy's streams then reach the upstream seconds late.
So a burst first waits until the idle connections an earlier burst left (an earlier attempt, or
the check run again on the same servers: the mock's records say when it ended) have outlived
httpx's keep-alive expiry (IDLE_EXPIRY_S): the pool then closes them before it hands any out.

Inconclusive (never a fail) only for the machine: an idle probe already took more than a quarter
of MAX_PROBE_S; or the upstream itself was slow to answer its own probe (the same probe, sent to
the upstream directly beside every proxy probe) while streams queued, so the whole machine
paused; or, with no stream queued, one probe was slow while the median stayed fast
(PAUSE_MEDIAN_S), unless the slow probes together were held for most of the experiment
(HELD_SHARE): a blocked loop is slow all along, while a correct proxy at half a CPU, whose CPU
the grader's other lanes share, can pause once for over a second (same section). The probes go
one at a time, so a loop blocked from the first stream to the last holds one probe all that
while, or two if it lets go for a moment between them, and leaves the few others fast (the
median then says nothing); a pause of the machine delays the streams as much as the probes, so
it fills three quarters of the experiment only if it lasts three times as long as the streams
do, past DEADLINE_S. Streams that queued behind others while the upstream answered at once are
never excused: a proxy whose workers are all busy (a thread pool smaller than the streams)
answers most probes at once and makes the rest of the streams wait, and that fails.

On a real engine (``observe_on_engine``) the streams are as many as the engine has
slots (ENGINE_STREAMS: more would wait in its queue, and a queued request gets no response
headers from llama-server, which no proxy can help). The slow first token is a prompt sized, by
the engine's prompt speed measured just before, to take ENGINE_FIRST_TOKEN_S alone; all four
together take about four times that. A blocking proxy gets all four to the engine (llama-server
sends its headers at once), then reads them on a blocked loop and answers no probe meanwhile:
its slow probes add up to about nine tenths of the experiment, in one probe or two. The probe
limit is half of ENGINE_FIRST_TOKEN_S, as on the mock; the engine's own gauge shows
how many requests it ran at once (``engine_peak_running``).

``observe`` (``observe_on_engine``) runs the experiment and returns what it measured
(``Measured``, ``EngineMeasured``); ``judge`` (``judge_on_engine``) decides through ``verdict``,
tested on constructed measurements in process (tests/checks/test_concurrency_pool.py). The
streams' pacing (``scenario``) and the deadlines (DEADLINE_S, ENGINE_DEADLINE_S) stretch with
the run's ``Budget``; the probe limits do not.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, ms
from labkit.checks.engine_requests import engine_body, measure_prompt_rate
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "concurrency"
STEP = "02_forwarding_proxy"
SUMMARY = "many concurrent streams all get through"
STREAMS = 110  # more than the 100 connections of httpx's and aiohttp's default pools
FIRST_SEED = 6000  # to 6119: a range no other check tags its requests with
TTFT_S = 3.0
TPS = 2
STREAM_S = 5.0  # from request to last token, at one CPU; stretched by the Budget (scenario())
ARRIVE_OVER_S = 2.0  # the streams start evenly over this time, as users arrive
DEADLINE_S = 20.0  # the streams need 7 s (12 s at half a CPU)
PROBE_EVERY_S = 0.1
MAX_PROBE_S = TTFT_S / 2  # a blocked loop waits for the first token, close to TTFT_S
CALIBRATION_PROBES = 5
IDLE_SHARE = 4  # an idle probe slower than a quarter of the limit: the machine cannot tell
# a slow probe with a median under this: one pause of the machine; a blocked loop's median is
# twice this or more (docs/measurements.md, "Why concurrency's thresholds")
PAUSE_MEDIAN_S = 0.075
HELD_SHARE = 0.75  # slow probes held this share of the experiment: the loop was blocked all along
# httpx keeps an idle connection 5 s (``keepalive_expiry``); a burst after another waits past it
IDLE_EXPIRY_S = 5.0 + 1.0
BUDGET_S = 26.0 + IDLE_EXPIRY_S  # a second attempt first waits for idle connections
ENGINE_BUDGET_S = 75.0

ENGINE_STREAMS = 4  # the grading engine's slots
ENGINE_FIRST_TOKEN_S = 1.5  # one stream's prompt, read alone
ENGINE_TOKENS = 16
ENGINE_DEADLINE_S = 40.0  # the four need about 8 s on two shared cores
ENGINE_MAX_PROBE_S = ENGINE_FIRST_TOKEN_S / 2
PEAK_EVERY_S = 0.25

result = Outcome(ID, STEP)

BLOCKING_ADVICE = (
    "use httpx.AsyncClient (never httpx.Client or requests) and await every wait inside "
    "async code; no time.sleep or blocking I/O on the event loop."
)
POOL_ADVICE = (
    "every open stream holds one upstream connection for its whole life: give make_client "
    "limits=httpx.Limits(max_connections=..., max_keepalive_connections=...) sized for the "
    "streams one proxy process carries (httpx's default pool has 100 connections)."
)


def scenario(budget: Budget) -> dict[str, int]:
    """Each stream's pacing on ``budget``'s machine: a TTFT_S first token, then TPS tokens a
    second until it has lasted STREAM_S stretched for ``budget`` (as long from one CPU up, twice
    at half a CPU). The longer streams keep a slow machine's late forwarding from looking like a
    pool: the last streams must still reach the upstream before the first one ends there."""
    tokens = round((budget.stretch(STREAM_S) - TTFT_S) * TPS)
    return {"ttft_ms": round(TTFT_S * 1000), "tps": TPS, "tokens": tokens}


@dataclass(frozen=True)
class Measured:
    """What one run of the experiment saw."""

    streams: int
    completed: list[Capture]
    idle_probes: list[float]
    probes: list[float]
    elapsed: float
    #: Streams that reached the upstream before any stream of the burst had ended there (None:
    #: an upstream that keeps no records, a real engine).
    reached_together: int | None = None
    #: Streams that reached it only after one of the burst had ended there (waited for a
    #: connection or a worker).
    reached_late: int | None = None
    #: The same probe sent to the upstream directly, beside the proxy's (empty: not probed).
    upstream_probes: list[float] = field(default_factory=list)


async def _one(
    ctx: CheckContext, body: dict[str, Any], deadline_s: float, after_s: float = 0.0
) -> Capture | None:
    await asyncio.sleep(after_s)
    try:
        return await acapture_stream(ctx.chat_url, json=body, timeout=deadline_s)
    except Exception:  # no response at all: counted as a stream that did not get through
        return None


async def _time_probe(client: httpx.AsyncClient, url: str) -> float:
    """Seconds for one ``GET /v1/models``; a probe that gets no answer counts as slow."""
    sent = time.monotonic()
    try:
        await client.get(url)
    except httpx.HTTPError:
        pass
    return time.monotonic() - sent


async def _probe(base_url: str, stop: asyncio.Event, client: httpx.AsyncClient) -> list[float]:
    """Time ``GET {base_url}/v1/models`` every PROBE_EVERY_S until ``stop``."""
    latencies: list[float] = []
    while not stop.is_set():
        latencies.append(await _time_probe(client, f"{base_url}/v1/models"))
        await asyncio.sleep(PROBE_EVERY_S)
    return latencies


def reached_together(records: list[Record], seeds: range, since: float = 0.0) -> tuple[int, int]:
    """How many of the burst's requests (tagged with ``seeds``) reached the upstream before any
    of them had completed there, and how many only after: those waited for another stream to
    give its connection back. Only a completed stream's end counts: one that failed or was
    cancelled early (a dropped connection, a client gone) ends long before the burst's streams
    are due to, and would make every later arrival look late. A request that never reached the
    upstream is in neither, nor one from before ``since`` (wall time: an earlier attempt of the
    same check)."""
    burst = [
        r
        for r in records
        if r.get("scenario", {}).get("seed") in seeds and r.get("started_at", 0.0) >= since
    ]
    ends = [
        r["ended_at"]
        for r in burst
        if r.get("ended_at") is not None and r.get("state") == "completed"
    ]
    first_end = min(ends, default=float("inf"))
    together = sum(r["started_at"] < first_end for r in burst)
    return together, len(burst) - together


def idle_wait_s(records: list[Record], seeds: range, now: float) -> float:
    """How long a new burst (its requests tagged with ``seeds``) waits, at wall time ``now``, for
    the idle upstream connections an earlier burst left in the proxy's pool to expire: 0 when
    the mock has no record of one, or it ended IDLE_EXPIRY_S ago."""
    ends = [
        r.get("ended_at") or r.get("started_at", 0.0)
        for r in records
        if r.get("scenario", {}).get("seed") in seeds
    ]
    return max(0.0, max(ends) + IDLE_EXPIRY_S - now) if ends else 0.0


async def _measure(
    ctx: CheckContext,
    streams: int,
    body: Callable[[int], dict[str, Any]],
    deadline_s: float,
    arrive_over_s: float = 0.0,
    probe_upstream: bool = True,
) -> Measured:
    """Probe the idle proxy, then start ``streams`` streams, evenly over ``arrive_over_s``, and
    probe until they end (or ``deadline_s``): the proxy, and with ``probe_upstream`` the
    upstream directly beside it."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=deadline_s) as client:
        idle = [
            await _time_probe(client, f"{ctx.proxy_url}/v1/models")
            for _ in range(CALIBRATION_PROBES)
        ]
        stop = asyncio.Event()
        prober = asyncio.create_task(_probe(ctx.proxy_url, stop, client))
        beside = _probe(ctx.upstream_url, stop, client) if probe_upstream else None
        upstream_prober = asyncio.create_task(beside) if beside is not None else None
        tasks = [
            asyncio.create_task(_one(ctx, body(i), deadline_s, i * arrive_over_s / streams))
            for i in range(streams)
        ]
        done, pending = await asyncio.wait(tasks, timeout=deadline_s)
        stop.set()
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        latencies = await prober
        upstream_latencies = await upstream_prober if upstream_prober is not None else []
    completed = [c for c in (t.result() for t in done) if c is not None and c.terminal == "done"]
    return Measured(
        streams,
        completed,
        idle,
        latencies,
        time.monotonic() - started,
        upstream_probes=upstream_latencies,
    )


async def observe(ctx: CheckContext) -> Measured:
    pacing = scenario(ctx.budget)
    seeds = range(FIRST_SEED, FIRST_SEED + STREAMS)
    earlier = await asyncio.to_thread(ctx.mock.requests)  # this run's and any before it
    await asyncio.sleep(idle_wait_s(earlier, seeds, time.time()))
    measured = await _measure(
        ctx,
        STREAMS,
        lambda i: chat_body(FIRST_SEED + i, pacing),
        ctx.budget.stretch(DEADLINE_S),
        ARRIVE_OVER_S,
    )
    together, late = reached_together(
        await ctx.records(), seeds, since=time.time() - measured.elapsed
    )
    return replace(measured, reached_together=together, reached_late=late)


def judge(measured: Measured, budget: Budget) -> CheckResult:
    """The verdict with the probe limit MAX_PROBE_S (``budget`` does not move it)."""
    return verdict(measured, MAX_PROBE_S)


@dataclass(frozen=True)
class EngineMeasured:
    """On an engine: what the experiment measured, the prompt each stream sent (its tokens, and
    when its first token was due alone) and the most requests the engine ran at once."""

    measured: Measured
    prompt_tokens_each: int
    first_token_due: float
    engine_peak_running: int


async def observe_on_engine(ctx: CheckContext) -> EngineMeasured:
    model = await ctx.books.model()
    rate = await measure_prompt_rate(ctx.upstream_url, model)
    sentences = rate.sentences_for(ENGINE_FIRST_TOKEN_S)
    async with ctx.books.watch(PEAK_EVERY_S) as watch:
        measured = await _measure(
            ctx,
            ENGINE_STREAMS,
            lambda i: engine_body(model, max_tokens=ENGINE_TOKENS, sentences=sentences),
            ctx.budget.stretch(ENGINE_DEADLINE_S),
            probe_upstream=False,  # llama-server's own answers slow down with its decoding
        )
    return EngineMeasured(
        measured,
        prompt_tokens_each=round(sentences * rate.tokens_per_sentence),
        first_token_due=rate.seconds_for(sentences),
        engine_peak_running=max(books.running for books in watch.samples),
    )


def judge_on_engine(observed: EngineMeasured, budget: Budget) -> CheckResult:
    """The verdict with the probe limit ENGINE_MAX_PROBE_S (``budget`` does not move it)."""
    extra = {
        "prompt_tokens_each": observed.prompt_tokens_each,
        "first_token_due_ms": ms(observed.first_token_due),
        "engine_peak_running": observed.engine_peak_running,
    }
    return verdict(observed.measured, ENGINE_MAX_PROBE_S, extra)


def verdict(
    measured: Measured, probe_limit_s: float, extra: Mapping[str, Any] | None = None
) -> CheckResult:
    """Pass: every stream through in time, no probe slower than ``probe_limit_s``, no stream
    that reached the upstream late. A machine too slow to tell: inconclusive."""
    totals = sorted(c.total_time for c in measured.completed)
    latencies = measured.probes
    idle_probe = statistics.median(measured.idle_probes)
    slowest_probe = max(latencies, default=0.0)
    median_probe = statistics.median(latencies) if latencies else 0.0
    idle_limit = probe_limit_s / IDLE_SHARE  # slower than this at idle: the machine cannot tell
    evidence = {
        "streams": measured.streams,
        "completed_in_time": len(measured.completed),
        "median_total_ms": ms(statistics.median(totals)) if totals else None,
        "max_total_ms": ms(totals[-1]) if totals else None,
        "idle_probe_ms": ms(idle_probe),
        "probes": len(latencies),
        "probe_median_ms": ms(median_probe) if latencies else None,
        "probe_max_ms": ms(slowest_probe),
        "probe_limit_ms": ms(probe_limit_s),
        **(
            {}
            if measured.reached_together is None
            else {
                "reached_upstream_together": measured.reached_together,
                "reached_upstream_late": measured.reached_late,
            }
        ),
        **(extra or {}),
        "elapsed_ms": ms(measured.elapsed),
    }
    upstream_slowest = max(measured.upstream_probes, default=None)
    if upstream_slowest is not None:
        evidence["upstream_probe_max_ms"] = ms(upstream_slowest)
    all_through = len(measured.completed) == measured.streams
    blocked = slowest_probe > probe_limit_s
    waited = bool(measured.reached_late)
    if all_through and not blocked and not waited:
        return result.passed("many concurrent streams all get through side by side", evidence)
    if idle_probe > idle_limit:
        return result.inconclusive(
            "inconclusive: the machine was too slow to time the proxy's answers",
            f"an idle probe already took {ms(idle_probe)} ms (more than {ms(idle_limit)} "
            f"ms), so a {ms(slowest_probe)} ms probe under load says nothing about blocking",
            evidence,
        )
    if upstream_slowest is not None and upstream_slowest > idle_limit and (blocked or waited):
        # the upstream, answering its own probe directly, was slow too: the whole machine paused,
        # and a pause delays arrivals as well, so queued streams say nothing about the proxy
        return result.inconclusive(
            "inconclusive: the machine paused while the proxy was being timed",
            f"the upstream itself took {ms(upstream_slowest)} ms to answer a probe sent to it "
            f"directly (more than {ms(idle_limit)} ms): the whole machine was slow, not only "
            "the proxy",
            evidence,
        )
    # a blocked loop keeps the probes waiting all along (many slow ones, or one or two that last
    # as long as the streams), and streams queue behind it too
    held = sum(p for p in latencies if p > probe_limit_s) > HELD_SHARE * measured.elapsed
    slow_all_along = blocked and (median_probe > PAUSE_MEDIAN_S or held)
    if slow_all_along or (blocked and not all_through and not waited):
        return result.failed(
            "the proxy stops answering while it waits on the upstream: every request waits for "
            "the one in progress",
            evidence,
            BLOCKING_ADVICE,
        )
    if blocked and not waited:
        return result.inconclusive(
            "inconclusive: the machine paused while the proxy was being timed",
            f"the slowest of {len(latencies)} probes took {ms(slowest_probe)} ms but the median "
            f"{ms(median_probe)} ms, and no stream queued: a blocked event loop keeps every "
            "probe waiting, not one",
            evidence,
        )
    if waited:
        return result.failed(
            "some streams waited: they reached the upstream only after other streams had ended "
            "there, so the proxy carries fewer streams at once than it is sent",
            evidence,
            POOL_ADVICE,
        )
    return result.failed(
        "some of many concurrent streams did not get through in time", evidence, BLOCKING_ADVICE
    )
