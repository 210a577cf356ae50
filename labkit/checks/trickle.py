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

On a real engine (``check_trickle_on_engine``): 40 tokens after a short prompt, at whatever pace
the engine has (15-50 tokens/s on two shared cores: one to three seconds). The engine's books,
read every 50 ms, give when it made its first token (it had read the prompt) and its last (the
decoded count last moved); the judgement is the same. Measured: a trickling proxy's first token
arrives within tens of ms of the engine's, its tokens span the whole generation (ratio about
1); a buffering one's arrive together after the last (ratio about 0).
"""

from __future__ import annotations

import statistics

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.engine_requests import engine_body
from labkit.checks.result import CheckResult

ID = "trickle"
STEP = "02_forwarding_proxy"
SEED = 4101
SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 40}
MAX_FIRST_LAG = 0.5  # of the upstream's generation time
MIN_SPREAD = 0.5  # of the upstream's generation time
ENGINE_TOKENS = 40
ENGINE_TIMEOUT_S = 30.0  # per read: a first token on a crowded machine can take seconds

result = Outcome(ID, STEP)


async def check_trickle(ctx: CheckContext) -> CheckResult:
    capture = await acapture_stream(ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=10)
    record = await ctx.record(SEED, until=finished)
    if record is None or record.get("first_token_at") is None:
        return _judge(capture, None)
    last = record.get("ended_at") or record["first_token_at"]
    return _judge(capture, (record["first_token_at"], last))


async def check_trickle_on_engine(ctx: CheckContext) -> CheckResult:
    body = engine_body(await ctx.books.model(), max_tokens=ENGINE_TOKENS)
    async with ctx.books.watch() as watch:
        capture = await acapture_stream(ctx.chat_url, json=body, timeout=ENGINE_TIMEOUT_S)
        await watch.until(lambda books: books.running == 0, timeout_s=ENGINE_TIMEOUT_S)
    return _judge(capture, watch.generation())


def _judge(capture: Capture, produced: tuple[float, float] | None) -> CheckResult:
    """The verdict from what the client saw and when the upstream made its first and last
    token (``time.time()``; None if it made none)."""
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
    evidence = {
        "upstream_first_token_ms": ms(produced_first),
        "upstream_last_token_ms": ms(produced_last),
        "client_first_token_ms": ms(arrived[0]),
        "client_median_token_ms": ms(statistics.median(arrived)),
        "client_last_token_ms": ms(arrived[-1]),
        "client_max_gap_ms": ms(max(capture.gaps, default=0.0)),
        "first_token_lag_ms": ms(first_lag),
        "spread_ratio": spread / generation,
        "token_events": len(arrived),
    }
    if first_lag <= MAX_FIRST_LAG * generation and spread >= MIN_SPREAD * generation:
        return result.passed("tokens reach the client as the upstream generates them", evidence)
    return result.failed(
        "tokens arrive in a burst at the end: something buffers the stream",
        evidence,
        "yield each upstream chunk as it arrives (no reading the whole body, no compressor "
        "or middleware that holds bytes back) and send X-Accel-Buffering: no.",
        step="03_gzip_buffering",
    )
