"""``backpressure``: a slow reader does not make the proxy's memory grow without bound.

Experiment: the upstream generates as fast as it can (a long stream with next to no pacing)
while the client reads a few kilobytes a second through a small receive buffer. We watch how
many tokens the mock has generated.

A proxy with backpressure (it reads the upstream only as fast as the client takes the bytes,
or through a *bounded* queue) lets the kernel's socket buffers fill, and then the upstream
cannot send any more: its token count stops moving, within about a second. A proxy that reads
the upstream into an unbounded queue keeps it going at full speed, and every token it reads
stays in its memory (about 10 MB a second here).

Pass: once flowing, the upstream's token count stands still for PLATEAU_S while the mock is
idle (it answers its debug endpoint at once: it is waiting, not busy or starved of CPU) before
WINDOW_S is over. "Stands still" allows MAX_CREEP tokens, as a slow reader does take a little.
Fail: the upstream finishes its whole stream (the proxy swallowed it) or is still
moving when the window closes. On this machine the kernel buffers (about 8 MB) fill within
about 1.5 s, then a held-back upstream stops dead; one that is not held back keeps moving at
whatever speed it gets. When the proxy's process id is known, its resident memory growth is
reported as evidence (about 1.5 MB held back, tens of MB not).

Run this check on a mock upstream of its own: at full speed it slows down any other
experiment sharing that mock (``arun_checks`` runs it after the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import psutil

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.result import CheckResult

ID = "backpressure"
STEP = "09_backpressure_and_slow_clients"
SEED = 5001
TOKENS = 250_000  # ~27 MB of events: three times what the kernel's socket buffers hold
SCENARIO = {"ttft_ms": 0, "tps": 100_000, "tokens": TOKENS}
WINDOW_S = 10.0
PLATEAU_S = 1.0
MAX_CREEP = 200  # tokens the upstream may still make while held back
MIN_FLOWING = 1000  # tokens before a standstill counts (the stream must have been flowing)
MAX_IDLE_POLL_S = 0.3  # a mock that answers its debug endpoint this fast is idle, not busy
READ_INTERVAL_S = 0.25
POLL_S = 0.1
MB = 1024 * 1024

result = Outcome(ID, STEP)


def _held_back(history: list[tuple[float, int, float]]) -> bool:
    """Over the last PLATEAU_S the upstream, once flowing, made almost no tokens while idle.

    "Idle" (every poll answered quickly) tells a held-back upstream from one too busy or too
    starved of CPU to answer: only the first is waiting for the proxy to read.
    """
    now = history[-1][0]
    window = [h for h in history if h[0] >= now - PLATEAU_S]
    before = [h for h in history if h[0] < now - PLATEAU_S]
    if not before or before[-1][1] < MIN_FLOWING:
        return False
    start = before[-1]
    idle = all(latency <= MAX_IDLE_POLL_S for _, _, latency in [start, *window])
    return idle and history[-1][1] - start[1] <= MAX_CREEP


def _rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


async def check_backpressure(ctx: CheckContext) -> CheckResult:
    rss_before = _rss(ctx.proxy_pid)
    rss_peak = rss_before
    client = asyncio.create_task(
        acapture_stream(
            ctx.chat_url,
            json=chat_body(SEED, SCENARIO),
            read_interval_s=READ_INTERVAL_S,
            disconnect_after_s=WINDOW_S,
            timeout=WINDOW_S + 5,
        )
    )
    started = time.monotonic()
    history: list[tuple[float, int, float]] = []  # (seconds, tokens generated, poll latency)
    held_at: float | None = None
    while not client.done():
        asked = time.monotonic()
        record = await ctx.record(SEED, wait_s=0)
        now = time.monotonic() - started
        if record is not None and record.get("state") != "running":
            break  # the upstream finished (or failed): nothing held it back
        tokens = 0 if record is None else int(record.get("tokens_generated") or 0)
        history.append((now, tokens, time.monotonic() - asked))
        rss = _rss(ctx.proxy_pid)
        if rss is not None and rss_peak is not None:
            rss_peak = max(rss_peak, rss)
        if _held_back(history):
            held_at = now
            break
        await asyncio.sleep(POLL_S)
    client.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await client
    record = await ctx.record(SEED, until=finished)
    evidence = {
        "upstream_tokens_generated": None if record is None else record.get("tokens_generated"),
        "held_back_after_ms": ms(held_at),
        "watched_ms": ms(history[-1][0]) if history else 0,
        "rss_growth_mb": None
        if rss_before is None or rss_peak is None
        else (rss_peak - rss_before) / MB,
    }
    if not history or history[-1][1] == 0:
        return result.failed(
            "the slow reader got no stream to read",
            evidence,
            "forward the upstream's stream (status 200, text/event-stream).",
            step="02_forwarding_proxy",
        )
    if held_at is not None:
        return result.passed(
            "a slow reader holds the upstream back, so the proxy's memory stays bounded",
            evidence,
        )
    return result.failed(
        "the proxy reads the upstream ahead of a slow client: its memory grows without bound",
        evidence,
        "let the client's pace reach the upstream: read the next upstream chunk only after the "
        "last one was sent, or put a bounded asyncio.Queue(maxsize=...) between them.",
    )
