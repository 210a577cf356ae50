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
"""

from __future__ import annotations

import statistics

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.result import CheckResult

ID = "trickle"
STEP = "02_forwarding_proxy"
SEED = 4101
SCENARIO = {"ttft_ms": 200, "tps": 20, "tokens": 40}
MAX_FIRST_LAG = 0.5  # of the upstream's generation time
MIN_SPREAD = 0.5  # of the upstream's generation time

result = Outcome(ID, STEP)


async def check_trickle(ctx: CheckContext) -> CheckResult:
    capture = await acapture_stream(ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=10)
    record = await ctx.record(SEED, until=finished)
    if capture.status != 200:
        return result.failed(
            "the proxy answered with an error status instead of a stream",
            {"status": capture.status},
            "forward the upstream's stream with status 200 and media type text/event-stream.",
        )
    if not capture.token_times or record is None or record.get("first_token_at") is None:
        return result.failed(
            "no tokens reached the client",
            {"terminal": capture.terminal, "token_events": capture.content_events},
            "forward every upstream event to the client as it arrives.",
        )
    produced_first = record["first_token_at"] - capture.started_at
    produced_last = (record.get("ended_at") or record["first_token_at"]) - capture.started_at
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
