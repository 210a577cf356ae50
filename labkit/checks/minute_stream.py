"""``minute_stream`` (profile ``gateway``): a stream longer than a minute, mostly silent, gets
through a client that hangs up on 30 s of idle.

What a deployed gateway meets and a notebook never does: load balancers and edge proxies cut a
response that runs too long or stays idle too long (nginx's ``proxy_read_timeout`` and AWS
ALB's idle timeout are 60 s by default; some edges cap a whole response). A reasoning model can
think for a minute before its next token. The lab's other checks stay short (``keepalive``
stalls 4.5 s, ``long_stream`` lasts 9 s); this one runs the real durations, so it is off by
default: ``labkit grade --profile gateway``.

Experiment: 32 tokens at 4 per second, then 50 s of upstream silence, then 32 more (about 67 s
in all, longer than nginx's and ALB's 60 s). The client reads with a 30 s idle limit, as a
strict load balancer would: only heartbeats (SSE comments) during the silence keep it reading.
Pass: every token and ``data: [DONE]`` arrive. A proxy whose heartbeats are rarer than every 30
s, whose upstream read timeout is shorter than 50 s, or that caps the whole response at a minute
fails, and the verdict says which way. ``observe`` runs it, ``judge`` decides (tested in
process: tests/checks/test_judges_minute_stream.py). Below one CPU the client's idle limit,
CLIENT_IDLE_S, stretches with the run's ``Budget`` (``judge`` reports the limit used).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.keepalive import _silence
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult
from labkit.errors import CaptureError

ID = "minute_stream"
STEP = "07_heartbeats_and_timeouts"
SUMMARY = "a stream of over a minute, mostly silent, gets through"
MOCK_ONLY = "needs a minute-long, mostly silent stream, which only the mock's pacing gives"
PROFILE = "gateway"
SEED = 4901
TOKENS = 64
STALL_S = 50.0
CLIENT_IDLE_S = 30.0  # the grader's client hangs up after this long without a byte
SCENARIO = {"ttft_ms": 500, "tps": 4, "tokens": TOKENS, "stall_after": 32, "stall_s": STALL_S}
BUDGET_S = 100.0  # the stream itself takes about 67 s

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """What the client saw, in seconds since the request was sent (its status and ending, the
    times of its token events and of every chunk of bytes, the tokens and comments received,
    and the transport error that ended it, ``ReadTimeout...`` when its idle limit struck), and
    the mock's record (``reached_upstream``: it got as far as its first token there)."""

    status: int | None
    terminal: str
    total_time: float
    tokens_received: int
    token_times: tuple[float, ...]
    chunk_times: tuple[float, ...]
    comments: int
    transport_error: str | None
    reached_upstream: bool
    upstream_state: str | None = None
    upstream_tokens: int | None = None


async def observe(ctx: CheckContext) -> Observed:
    try:
        capture = await acapture_stream(
            ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=ctx.budget.stretch(CLIENT_IDLE_S)
        )
    except CaptureError as exc:
        if not exc.error.startswith("ReadTimeout"):
            raise
        # No response headers within the idle limit: a gateway that holds the whole response.
        capture = Capture(url=ctx.chat_url, transport_error=exc.error)
    record = await ctx.record(SEED, until=finished)
    return Observed(
        status=capture.status,
        terminal=capture.terminal,
        total_time=capture.total_time,
        tokens_received=capture.tokens_received,
        token_times=tuple(capture.token_times),
        chunk_times=tuple(c.t for c in capture.chunks),
        comments=len(capture.comments),
        transport_error=capture.transport_error,
        reached_upstream=record is not None and record.get("first_token_at") is not None,
        upstream_state=None if record is None else record.get("state"),
        upstream_tokens=None if record is None else record.get("tokens_generated"),
    )


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: a 200 that ends with ``[DONE]``. A fail says which way it broke: the client's idle
    limit, the proxy giving up on the upstream, or a cut."""
    silence = _silence(list(observed.token_times))
    # the wait after the last chunk counts too: it is where a client's idle limit strikes
    chunk_times = observed.chunk_times
    last_byte_at = chunk_times[-1] if chunk_times else 0.0
    chunk_gaps = [b - a for a, b in itertools.pairwise(chunk_times)]
    quiet = max([*chunk_gaps, observed.total_time - last_byte_at])
    evidence = {
        "status": observed.status,
        "terminal": observed.terminal,
        "client_total_ms": ms(observed.total_time),
        "tokens_received": observed.tokens_received,
        "upstream_tokens": observed.upstream_tokens,
        "upstream_state": observed.upstream_state,
        "upstream_silence_ms": ms(STALL_S),
        "client_idle_limit_ms": ms(budget.stretch(CLIENT_IDLE_S)),
        "longest_gap_between_tokens_ms": None if silence is None else ms(silence[1] - silence[0]),
        "longest_gap_between_bytes_ms": ms(quiet),
        "comments": observed.comments,
        "transport_error": observed.transport_error,
    }
    if not observed.reached_upstream:
        return result.never_reached(evidence)
    if observed.status == 200 and observed.terminal == "done":
        return result.passed(
            "a stream of more than a minute, silent for most of it, reaches the client",
            evidence,
        )
    if (observed.transport_error or "").startswith("ReadTimeout"):
        return result.failed(
            "nothing reached the client for longer than its idle limit while the upstream "
            "was silent",
            evidence,
            "send an SSE comment at least every few seconds while the upstream is silent, "
            "and make sure whatever sits in front of the proxy passes it on at once.",
        )
    if observed.terminal == "error":
        return result.failed(
            "the proxy gave up on the upstream during its silence",
            evidence,
            "allow the upstream a minute or more between two reads (httpx.Timeout(read=...)): "
            "a model may think that long before its next token.",
        )
    return result.failed(
        "the stream was cut before it ended",
        evidence,
        "put no limit on a stream's total time: bound the silence between reads instead.",
    )
