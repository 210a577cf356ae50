"""``trickle``: tokens reach the client as the upstream generates them, not in a burst at the end.

Experiment: about 2 s of tokens (first token after 0.2 s, then 20 tokens/s). For each token
event the client notes its arrival; the mock notes when it produced its first and last token.
A forwarding proxy delivers the first token within milliseconds of its production and spreads
the rest over the same ~2 s; a buffering one delivers everything after the upstream finished.
Pass: the first token arrives within half the generation time after the upstream made it
(~1 s; a trickling proxy needs a few ms, a couple of hundred on half a CPU, a buffering one the
whole generation) and the client's tokens span at least half of the upstream's generation time
(a trickling proxy spans all of it, a buffering one a few ms). Both are ratios of the
upstream's own generation time, so a slow machine moves neither much.

A pass can carry a warning: the proxy *batches* its sends (HAProxy without
``option http-no-delay`` holds them about 200 ms; a flush timer or Nagle's algorithm does the
same). Its tokens still span the generation, but they arrive in groups. The yardstick is the
upstream's token interval (its generation time over its tokens: 50 ms here): token events less
than HELD_GAP of it apart arrived together. Warned when the client's longest gap is over
BATCH_GAP intervals (the mock's chunks hold one to three tokens, so a trickling proxy's longest
is three) *and* at least BATCHED_SHARE of the token events arrived in groups. Measured: a
200 ms batcher's gaps are 200 ms (four intervals) and every event is in a group; the
reference's longest gap is 150-160 ms (a three-token chunk) and no event is in a group. A loaded
machine gives an occasional long gap followed by one group, not a pattern: most events still
arrive alone. A proxy that holds everything to the end fails, with no warning.

On a real engine (``observe_on_engine``): 40 tokens after a short prompt, at whatever pace
the engine has (15-50 tokens/s on two shared cores: one to three seconds). The engine's books,
read every 50 ms, give when it made its first token (it had read the prompt) and its last (the
decoded count last moved); the judgement is the same. Measured: a trickling proxy's first token
arrives within tens of ms of the engine's, its tokens span the whole generation (ratio about
1); a buffering one's arrive together after the last (ratio about 0).

``observe`` and ``observe_on_engine`` return what the client saw and when the upstream made its
first and last token (``Observed``); ``judge`` decides for both, and is tested in process
(tests/checks/test_judges_trickle.py). The client gives up a read after LIMIT_S (ENGINE_LIMIT_S on
an engine), stretched with the run's ``Budget``.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.engine_requests import engine_body
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.shape import MAX_FIRST_LAG, MIN_SPREAD  # the rule the notebooks' stream_shape reads

ID = "trickle"
STEP = "02_forwarding_proxy"
SUMMARY = "tokens reach the client as they are generated"
BUDGET_S = 10.0
ENGINE_BUDGET_S = 45.0
LIMIT_S = 10.0  # per read: the stream takes about 2 s
SEED = 4101
SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 40}
HELD_GAP = 0.2  # of a token interval: token events closer than this arrived together
BATCH_GAP = 3.0  # token intervals: a longer gap between groups is a held send
BATCHED_SHARE = 0.5  # of the token events arriving in groups
BATCHED = (
    "tokens arrive in batches with long gaps between them: something holds sends back and "
    "releases them together (a flush timer, send coalescing, Nagle's algorithm)"
)
ENGINE_TOKENS = 40
ENGINE_LIMIT_S = 30.0  # per read: a first token on a crowded machine can take seconds

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """What the client saw, and when the upstream made its first and last token
    (``time.time()``; None if it made none)."""

    capture: Capture
    produced: tuple[float, float] | None


async def observe(ctx: CheckContext) -> Observed:
    capture = await acapture_stream(
        ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=ctx.budget.stretch(LIMIT_S)
    )
    record = await ctx.record(SEED, until=finished)
    if record is None or record.get("first_token_at") is None:
        return Observed(capture, None)
    last = record.get("ended_at") or record["first_token_at"]
    return Observed(capture, (record["first_token_at"], last))


async def observe_on_engine(ctx: CheckContext) -> Observed:
    body = engine_body(await ctx.books.model(), max_tokens=ENGINE_TOKENS)
    limit = ctx.budget.stretch(ENGINE_LIMIT_S)
    async with ctx.books.watch() as watch:
        capture = await acapture_stream(ctx.chat_url, json=body, timeout=limit)
        await watch.until(lambda books: books.running == 0, timeout_s=limit)
    return Observed(capture, watch.generation())


def judge_on_engine(observed: Observed, budget: Budget) -> CheckResult:
    """The same judgement as on the mock: the engine's books give when it made its tokens."""
    return judge(observed, budget)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """The verdict from what the client saw and when the upstream made its first and last
    token. Every bound is a ratio of the upstream's own generation time: ``budget`` moves
    none of them."""
    capture, produced = observed.capture, observed.produced
    if capture.status != 200:
        return result.failed(
            "the proxy answered with an error status instead of a stream",
            {"status": capture.status},
            "forward the upstream's stream with status 200 and media type text/event-stream.",
        )
    if not capture.token_times or produced is None:
        return result.failed(
            "no tokens reached the client",
            {"terminal": capture.terminal, "token_events": capture.content_events},
            "forward every upstream event to the client as it arrives.",
        )
    produced_first = produced[0] - capture.started_at
    produced_last = produced[1] - capture.started_at
    generation = max(produced_last - produced_first, 1e-3)
    arrived = capture.token_times
    first_lag = arrived[0] - produced_first
    spread = arrived[-1] - arrived[0]
    tokens = max(capture.tokens_received, len(arrived))
    interval = generation / max(tokens - 1, 1)
    groups = _groups(arrived, HELD_GAP * interval)
    grouped = sum(groups) / len(arrived)
    max_gap = max(capture.gaps, default=0.0)
    evidence = {
        "upstream_first_token_ms": ms(produced_first),
        "upstream_last_token_ms": ms(produced_last),
        "client_first_token_ms": ms(arrived[0]),
        "client_median_token_ms": ms(statistics.median(arrived)),
        "client_last_token_ms": ms(arrived[-1]),
        "client_max_gap_ms": ms(max_gap),
        "first_token_lag_ms": ms(first_lag),
        "spread_ratio": spread / generation,
        "token_events": len(arrived),
        "upstream_token_interval_ms": interval * 1000,
        "client_groups": len(groups),
        "grouped_share": grouped,
    }
    if first_lag <= MAX_FIRST_LAG * generation and spread >= MIN_SPREAD * generation:
        batched = max_gap > BATCH_GAP * interval and grouped >= BATCHED_SHARE
        return result.passed(
            "tokens reach the client as the upstream generates them",
            evidence,
            warning=BATCHED if batched else "",
        )
    return result.failed(
        "tokens arrive in a burst at the end: something buffers the stream",
        evidence,
        "yield each upstream chunk as it arrives (no reading the whole body, no compressor "
        "or middleware that holds bytes back) and send X-Accel-Buffering: no.",
        step="03_gzip_buffering",
    )


def _groups(arrived: list[float], together_s: float) -> list[int]:
    """The sizes of the groups of two or more arrivals, each within ``together_s`` of the one
    before it (arrivals alone are no group)."""
    sizes: list[int] = []
    run = 1
    for before, after in itertools.pairwise(arrived):
        if after - before <= together_s:
            run += 1
            continue
        if run > 1:
            sizes.append(run)
        run = 1
    return [*sizes, run] if run > 1 else sizes
