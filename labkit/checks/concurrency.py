"""``concurrency``: many streams at once all get through, and the event loop is never blocked.

Experiment: 50 streams start together, each with a 1 s first token and 20 tokens at 20
tokens/s (2 s each). Meanwhile a probe asks the proxy for ``GET /v1/models`` every 0.1 s and
times the answer: any answer counts (a 404 too), since it only measures whether the proxy's
event loop is free to answer at all.

An async proxy answers a probe in milliseconds and runs the streams side by side. A proxy that
blocks its event loop while it waits on the upstream (a sync HTTP client, ``time.sleep``,
blocking I/O) cannot answer anything during the wait: a probe sent while it waits 1 s for a
first token takes most of that second. Pass: every stream ends with ``data: [DONE]`` within
DEADLINE_S, and no probe took longer than MAX_PROBE_S (0.5 s, against a few ms when the loop is
free and about 1 s when it is blocked).
"""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, ms
from labkit.checks.result import CheckResult

ID = "concurrency"
STEP = "02_forwarding_proxy"
STREAMS = 50
FIRST_SEED = 4900
SCENARIO = {"ttft_ms": 1000, "tps": 20, "tokens": 20}
DEADLINE_S = 6.0
PROBE_EVERY_S = 0.1
MAX_PROBE_S = 0.5

result = Outcome(ID, STEP)


async def _one(ctx: CheckContext, seed: int) -> Capture | None:
    try:
        return await acapture_stream(ctx.chat_url, json=chat_body(seed, SCENARIO), timeout=10)
    except Exception:  # no response at all: counted as a stream that did not get through
        return None


async def _probe(ctx: CheckContext, stop: asyncio.Event) -> list[float]:
    """Time ``GET /v1/models`` until ``stop``; a probe that gets no answer counts as slow."""
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                await client.get(f"{ctx.proxy_url}/v1/models")
            except httpx.HTTPError:
                pass
            latencies.append(time.monotonic() - sent)
            await asyncio.sleep(PROBE_EVERY_S)
    return latencies


async def check_concurrency(ctx: CheckContext) -> CheckResult:
    started = time.monotonic()
    stop = asyncio.Event()
    prober = asyncio.create_task(_probe(ctx, stop))
    tasks = [asyncio.create_task(_one(ctx, FIRST_SEED + i)) for i in range(STREAMS)]
    done, pending = await asyncio.wait(tasks, timeout=DEADLINE_S)
    stop.set()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    latencies = await prober
    completed = [c for c in (t.result() for t in done) if c is not None and c.terminal == "done"]
    totals = sorted(c.total_time for c in completed)
    evidence = {
        "streams": STREAMS,
        "completed_in_time": len(completed),
        "median_total_ms": ms(statistics.median(totals)) if totals else None,
        "max_total_ms": ms(totals[-1]) if totals else None,
        "probes": len(latencies),
        "probe_median_ms": ms(statistics.median(latencies)) if latencies else None,
        "probe_max_ms": ms(max(latencies)) if latencies else None,
        "elapsed_ms": ms(time.monotonic() - started),
    }
    slowest_probe = max(latencies, default=0.0)
    if len(completed) == STREAMS and slowest_probe <= MAX_PROBE_S:
        return result.passed("many concurrent streams all get through side by side", evidence)
    if slowest_probe > MAX_PROBE_S:
        verdict = "the proxy stops answering while it waits on the upstream: its event loop blocks"
    else:
        verdict = "some of many concurrent streams did not get through in time"
    return result.failed(
        verdict,
        evidence,
        "use httpx.AsyncClient (never httpx.Client or requests) and await every wait inside "
        "async code; no time.sleep or blocking I/O on the event loop.",
    )
