"""``backpressure``: a slow reader does not make the proxy's memory grow without bound.

Experiment: the upstream generates as fast as it can (400,000 tokens, about 43 MB of events,
with next to no pacing) while the client reads a little at a time through a small receive
buffer. Every POLL_S we compare two counts, both in tokens: how many the mock has *sent*
(``tokens_sent``: in frames its server handed to the socket towards the proxy), and how many the
client has read (it counts the text it got with the mock's own tokenizer). Their difference, the
*lead*, is what sits between them, in socket buffers and in the proxy. (The slow reader takes
next to nothing, a few tokens a second, so the lead is nearly the upstream's sent count.)

The mock, like a real engine (llama.cpp, vLLM), does not pause for a slow reader: it goes on
generating, and billing, at its pace until the request is cancelled, and keeps what it could
not send in its own buffer. So its *generated* count says nothing about the proxy; what the
proxy controls is how much the upstream can send. A proxy with backpressure (it reads the
upstream only as fast as the client takes the bytes, or through a *bounded* queue) lets the
kernel's socket buffers fill, and then the upstream can send no more: its sent count stands
still while the client goes on reading, and the proxy's memory stays bounded. The lead stops
at what the buffers hold, whatever the machine's speed: 44,000 to 89,000 tokens measured here
(the kernel's autotuned socket buffers, about 5 MB on each side of the proxy), for both
references and the broken proxies whose bug lies elsewhere, at 0.5, 1 and 2 CPUs. A proxy that
reads the upstream into an unbounded queue takes everything the upstream sends: the lead grows
until the whole stream has been sent, and every token of it is in the proxy's memory.

Pass: once flowing (MIN_FLOWING tokens sent), the upstream's sent count stands still (at most
MAX_CREEP more tokens) for PLATEAU_S while the client reads on, with a lead under LEAD_LIMIT.
Fail: the lead passes LEAD_LIMIT (180,000 tokens, twice the most any correct proxy's buffers
held), or the upstream has sent its whole stream while the client has read little (or
the proxy ends the slow reader's stream early, which is not holding it back either). Correct
and broken land far apart in tokens, not in seconds: a slow machine only takes longer to get
there (a correct proxy's buffers are full after about 6 s at half a CPU, 4 s at one; an
unbounded queue passed 200,000 tokens after about 13 s and 9 s).

The proxy's memory is never what passes or fails it (a slow machine grows it slowly), but a
failing verdict says where what it read ahead went, when it can tell: with the proxy's process
id (graded as a file) its resident memory is sampled, and a growth of MEMORY_GROWTH_MB or more
by the time the lead passed the limit means it kept it in memory; less, that it kept it outside
(a temporary file, as lighttpd and nginx's proxy buffering do). Graded by URL there is no
process to measure, and the verdict says so. At the limit the lead is about 19 MB of events on
the wire; measured growth at 200,000 tokens: an unbounded queue 38 MB (Python strings), a proxy
spooling to a temporary file 1.3-1.7 MB, the reference with its buffers full 1.3-1.5 MB
(docs/measurements.md).

Inconclusive (never a fail): the window (``window_s``: 55 s, twice that below one CPU) closes
while the upstream is still sending with a lead under LEAD_LIMIT, or its sent count stands still
while the client gets no CPU to read: the machine was too slow to reach either case. The window
only ever runs out for a proxy whose upstream is still sending (a proxy that holds back stands
still within seconds), so its length costs a correct proxy nothing. It is long enough for the
slowest shared machine measured, where an unbounded queue took up to 49 s to pass the limit
(docs/measurements.md, "Three timed checks on a loaded machine"). An inconclusive result is not
run again (``RETRY_INCONCLUSIVE``): a machine too slow for one such window is as slow for a
second, and two would outlast the submission's time limit (the check's budget, the window and
5 s, with the proxy's start fits the default 90 s).

Run this check on a mock upstream of its own: at full speed it slows down any other
experiment sharing that mock (``arun_checks`` runs it after the others, and below two CPUs
after every other lane in its event loop, see ``labkit.checks.runner``).

``observe`` runs the experiment and returns what it saw (``BackpressureEvidence``); ``judge``
holds every rule, pure, so the rules are tested on constructed samples in process
(tests/checks/test_judges_backpressure.py). The watch stops on the same rules
(``watch_outcome``) that the judge reads its verdict from.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass, field
from typing import Literal

import httpx
import psutil

from labkit.capture import SLOW_READER_RCVBUF
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished, ms
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.sse import SSEDecoder, SSEEvent
from labkit.wire import interpret_event
from mock_upstream.tokenizer import count_tokens

ID = "backpressure"
STEP = "10_backpressure_and_slow_clients"
SUMMARY = "a slow reader does not grow the proxy memory"
MOCK_ONLY = (
    "needs an upstream streaming flat out, thousands of tokens a second, which only the mock does"
)
RETRY_INCONCLUSIVE = False  # a machine too slow for its long window is as slow again
SEED = 5001
TOKENS = 400_000  # ~43 MB of events: four times what the socket buffers held at most
SCENARIO = {"ttft_ms": 0, "tps": 100_000, "tokens": TOKENS}
WINDOW_S = 55.0  # at one CPU or more; up to twice as long below (``window_s``)
MAX_WINDOW_STRETCH = 2.0
READ_SLACK_S = 5.0  # the reader's read timeout: the window and this
BUDGET_S = WINDOW_S + READ_SLACK_S
PLATEAU_S = 1.0
MAX_CREEP = 200  # tokens the upstream may still send while the buffers are full
MIN_FLOWING = 1000  # tokens sent before a standstill counts (the stream must have flowed)
LEAD_LIMIT = 180_000  # tokens between upstream and client: twice the most buffers held
CLOCK_LEEWAY_S = 1.0
MEMORY_GROWTH_MB = 10.0  # about half what LEAD_LIMIT tokens take on the wire: kept in memory
READ_INTERVAL_S = 0.25
POLL_S = 0.1
MB = 1024 * 1024

WatchOutcome = Literal["finished", "ahead", "held"]

result = Outcome(ID, STEP)


@dataclass
class SlowReader:
    """A client that reads a little at a time and counts the tokens it has read so far."""

    status: int | None = None
    bytes_read: int = 0
    tokens_read: int = 0
    reads: int = 0
    ended: bool = False
    error: str | None = None
    _decoder: SSEDecoder = field(default_factory=SSEDecoder)

    def take(self, data: bytes) -> None:
        self.bytes_read += len(data)
        self.reads += 1
        for item in self._decoder.decode(data):
            if isinstance(item, SSEEvent):
                meaning = interpret_event(item.event, item.data)
                if meaning.text:
                    self.tokens_read += count_tokens(meaning.text)

    async def read(self, url: str, body: dict[str, object], *, timeout_s: float) -> None:
        transport = httpx.AsyncHTTPTransport(
            socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)]
        )
        try:
            async with (
                httpx.AsyncClient(transport=transport, timeout=timeout_s) as client,
                client.stream("POST", url, json=body) as response,
            ):
                self.status = response.status_code
                async for data in response.aiter_raw():
                    self.take(data)
                    await asyncio.sleep(READ_INTERVAL_S)
        except httpx.HTTPError as failure:
            self.error = type(failure).__name__
        finally:
            self.ended = True


@dataclass(frozen=True)
class Sample:
    t: float
    sent: int  # by the upstream (``tokens_sent``), not generated: it generates on regardless
    read: int
    reads: int

    @property
    def lead(self) -> int:
        return self.sent - self.read


def read_ahead_verdict(rss_growth_mb: float | None) -> str:
    """What a proxy that read the upstream ahead without bound did with it: kept it in memory
    (its resident memory grew by MEMORY_GROWTH_MB or more), outside it (less), or unknown
    (``None``: graded by URL, no process to measure)."""
    ahead = "the proxy reads the upstream ahead of a slow client without bound"
    if rss_growth_mb is None:
        return f"{ahead} (where it keeps what it read was not measured)"
    if rss_growth_mb >= MEMORY_GROWTH_MB:
        return f"{ahead}, and its memory grows with what it read"
    return f"{ahead}, keeping what it read outside memory (in a temporary file, say)"


def window_s(budget: Budget) -> float:
    """How long we watch for either outcome: WINDOW_S, stretched on a machine with less than
    one CPU, at most MAX_WINDOW_STRETCH times."""
    return WINDOW_S * min(budget.scale, MAX_WINDOW_STRETCH)


def _held_back(history: list[Sample]) -> bool:
    """Over the last PLATEAU_S the upstream, once flowing, sent almost no tokens, while the
    client went on reading (so the grader had CPU: the buffers were full, not the machine
    starved)."""
    now = history[-1]
    before = [s for s in history if s.t < now.t - PLATEAU_S]
    if not before or before[-1].sent < MIN_FLOWING:
        return False
    start = before[-1]
    return now.sent - start.sent <= MAX_CREEP and now.reads > start.reads


def watch_outcome(history: list[Sample], *, stream_over: bool) -> WatchOutcome | None:
    """What the samples so far decide, if anything: the upstream's stream is over
    (``finished``), the lead passed LEAD_LIMIT (``ahead``), or the upstream was held back
    (``held``); None: watch on."""
    if stream_over:
        return "finished"
    if history and history[-1].lead > LEAD_LIMIT:
        return "ahead"
    if history and _held_back(history):
        return "held"
    return None


@dataclass(frozen=True)
class BackpressureEvidence:
    """What one run of the experiment saw: the samples (the lead over time), whether the
    upstream's stream to the proxy was over at the last of them, and the upstream's state then;
    the tokens it generated in all; what the slow reader got (its count, the status, an error);
    whether its stream ended before we stopped watching; and how much the proxy's memory grew
    (None: no process to measure)."""

    samples: tuple[Sample, ...]
    stream_over: bool
    upstream_state: str
    upstream_tokens_generated: int | None
    client_tokens_read: int
    status: int | None
    error: str | None
    ended_by_itself: bool
    rss_growth_mb: float | None


def _stream_over(record: Record) -> bool:
    """The upstream's stream to the proxy is over: the request was cancelled or failed, or it
    was generated whole and every token of it sent. (A record is ``completed`` once its last
    token is generated, while frames may still wait for the proxy to take them.)"""
    state = record.get("state")
    if state == "running":
        return False
    if state == "completed":
        return _count(record, "tokens_sent") >= _count(record, "tokens_generated")
    return True


def _ours(record: Record | None, sent_at: float) -> Record | None:
    """``record`` if it is of the request sent at ``sent_at`` (``time.time()``; a second's
    leeway between clocks, as ``CheckContext.records``), else None: a run again after an
    inconclusive one (WINDOW_S earlier) must not read that run's stream, still being cancelled,
    whose sent count would seem to stand still, or fall."""
    if record is None or record.get("started_at", 0.0) < sent_at - CLOCK_LEEWAY_S:
        return None
    return record


def _count(record: Record | None, key: str) -> int:
    return 0 if record is None else int(record.get(key) or 0)


def _rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


async def observe(ctx: CheckContext) -> BackpressureEvidence:
    """Run the experiment: a slow reader against a flat-out upstream, sampled every POLL_S
    until ``watch_outcome`` decides, the reader's stream ends, or ``window_s`` closes."""
    window = window_s(ctx.budget)
    rss_before = _rss(ctx.proxy_pid)
    rss_peak = rss_before
    reader = SlowReader()
    sent_at = time.time()
    body = chat_body(SEED, SCENARIO)
    read_s = window + ctx.budget.stretch(READ_SLACK_S)
    client = asyncio.create_task(reader.read(ctx.chat_url, body, timeout_s=read_s))
    started = time.monotonic()
    history: list[Sample] = []
    over = False
    upstream_state = "running"
    try:
        while not reader.ended and time.monotonic() - started < window:
            record = _ours(await ctx.record(SEED, wait_s=0), sent_at)
            sent = _count(record, "tokens_sent")
            history.append(
                Sample(time.monotonic() - started, sent, reader.tokens_read, reader.reads)
            )
            rss = _rss(ctx.proxy_pid)
            if rss is not None and rss_peak is not None:
                rss_peak = max(rss_peak, rss)
            if record is not None:
                upstream_state = str(record.get("state"))
            over = record is not None and _stream_over(record)
            if watch_outcome(history, stream_over=over) is not None:
                break
            await asyncio.sleep(POLL_S)
        # read before the reader is cancelled below, which ends it too
        ended_by_itself = reader.ended
    finally:
        client.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await client
    record = _ours(await ctx.record(SEED, until=finished), sent_at)
    return BackpressureEvidence(
        samples=tuple(history),
        stream_over=over,
        upstream_state=upstream_state,
        upstream_tokens_generated=None if record is None else record.get("tokens_generated"),
        client_tokens_read=reader.tokens_read,
        status=reader.status,
        error=reader.error,
        ended_by_itself=ended_by_itself,
        rss_growth_mb=None
        if rss_before is None or rss_peak is None
        else (rss_peak - rss_before) / MB,
    )


def judge(seen: BackpressureEvidence, budget: Budget) -> CheckResult:
    """The verdict on what ``observe`` saw; ``budget`` is the machine it ran on
    (its window goes in the evidence)."""
    history = list(seen.samples)
    outcome = watch_outcome(history, stream_over=seen.stream_over)
    last = history[-1] if history else Sample(0.0, 0, 0, 0)
    evidence = {
        "upstream_tokens_sent": last.sent,
        "upstream_tokens_generated": seen.upstream_tokens_generated,
        "client_tokens_read": seen.client_tokens_read,
        "lead_tokens": last.lead,
        "max_lead_tokens": max((s.lead for s in history), default=0),
        "upstream_state": seen.upstream_state,
        "decided_after_ms": ms(last.t),
        "rss_growth_mb": seen.rss_growth_mb,
        "window_ms": ms(window_s(budget)),
    }
    if outcome == "held":
        return result.passed(
            "a slow reader holds back what the upstream can send, so the proxy's memory stays "
            "bounded",
            evidence,
        )
    if outcome == "ahead" or (outcome == "finished" and seen.upstream_state == "completed"):
        return result.failed(
            read_ahead_verdict(seen.rss_growth_mb),
            evidence,
            "let the client's pace reach the upstream: read the next upstream chunk only after "
            "the last one was sent, or put a bounded asyncio.Queue(maxsize=...) between them.",
        )
    if seen.status != 200 or last.sent == 0:
        return result.failed(
            "the slow reader got no stream to read",
            {**evidence, "status": seen.status, "error": seen.error},
            "forward the upstream's stream (status 200, text/event-stream).",
            step="02_forwarding_proxy",
        )
    if outcome == "finished" or seen.ended_by_itself:
        return result.failed(
            "the stream to a slow reader ended early instead of holding back what the upstream "
            "sends",
            {**evidence, "error": seen.error},
            "keep a slow client's stream open and let its pace reach the upstream: no write "
            "timeout that drops it, and a bounded asyncio.Queue(maxsize=...) between them.",
        )
    earlier = [s for s in history if s.t < last.t - PLATEAU_S]
    moving = not earlier or last.sent - earlier[-1].sent > MAX_CREEP
    if moving:
        reason = (
            f"after {last.t:.1f} s the upstream had sent {last.sent} tokens and was still "
            f"sending, with a lead of {last.lead} tokens (under {LEAD_LIMIT}): neither held "
            "back nor running away yet"
        )
    else:
        reason = (
            f"the upstream's sent count stood still at {last.sent} tokens, but the slow reader "
            "got no CPU to read meanwhile: full buffers and a starved machine look the same"
        )
    return result.inconclusive(
        "inconclusive: the machine was too slow to fill the socket buffers in time",
        reason,
        evidence,
    )
