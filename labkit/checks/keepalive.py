"""``keepalive``: while the upstream is silent, the proxy sends SSE comment heartbeats.

The lab's contract: after at most 3 s of upstream silence, send an SSE comment line such as
``: keep-alive`` (and again while the silence lasts). Load balancers and proxies cut idle
connections (nginx after 60 s by default); a comment keeps the connection busy and every SSE
client ignores it. Production proxies often use 15 s (sse-starlette's default); the lab asks
for 3 s so this check stays quick. The reference proxy sends one every 2 s (``HEARTBEAT_S``).

Experiment: three tokens, then the upstream goes silent for 4.5 s (under httpx's default 5 s
read timeout, so this check does not also test timeouts), then the rest. The silence is taken
as the client saw it: the longest gap between two token events. Pass: the stream ends with
``data: [DONE]`` and at least one comment arrived inside that gap, no later than three
quarters of the way through it (a heartbeat due after 2 s of a 4.5 s silence arrives about
half-way; a comment that only comes out with the next token, as from a proxy whose loop was
blocked or that buffers, arrives at the gap's end or not inside it at all). Nothing here is a
wall-clock bound: a slow machine stretches the gap and the heartbeat alike.

The client runs in the grader's event loop beside other lanes' clients; if that loop was held up
(``loop_watch``) for more than GRADER_PAUSE_S, comments that did come, but late, may have waited
in the socket for the grader, not for the proxy: the result is then inconclusive, and run again.
A proxy that sent no comment at all fails whatever the grader did.

A proxy that holds the whole stream back (a buffer, a compressor without flushes) also fails,
with its own verdict: the client's longest gap is then far shorter than the upstream's silence
(under HIDDEN_SHARE of it), so the client never saw a silence to fill; it waited before the
first byte instead.

``observe`` runs the experiment and returns what the client saw; ``judge`` holds every rule, and
is tested on constructed observations in process (tests/checks/test_judges_keepalive.py). The
client's read timeout, LIMIT_S, stretches with the run's ``Budget``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.loop_watch import watch_loop
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "keepalive"
STEP = "07_heartbeats_and_timeouts"
SUMMARY = "SSE comments while the upstream is silent"
BUDGET_S = 16.0
MOCK_ONLY = "needs an upstream silent for seconds mid-stream, which only the mock's pacing gives"
LIMIT_S = 20.0  # the client's read timeout: past the upstream's longest silence
SEED = 4801
STALL_S = 4.5
TPS = 20
SCENARIO = {"ttft_ms": 200, "tps": TPS, "tokens": 12, "stall_after": 3, "stall_s": STALL_S}
LATEST_IN_GAP = 0.75  # a heartbeat must come this far into the silence at the latest
HIDDEN_SHARE = 0.5  # a client gap shorter than this share of the silence: it never saw it
# A 3 s heartbeat (the contract's latest) reaches the latest point with 0.375 s to spare; a longer
# pause of the grader's loop could make it look late.
GRADER_PAUSE_S = 0.25

result = Outcome(ID, STEP)


def _silence(token_times: list[float]) -> tuple[float, float] | None:
    """The longest gap between two token events, as the client saw it (None: no gap)."""
    gaps = list(itertools.pairwise(token_times))
    return max(gaps, key=lambda gap: gap[1] - gap[0], default=None)


@dataclass(frozen=True)
class Observed:
    """What the client saw of the stream (its status and ending, the times of its token events
    and of its comments, in seconds since the request was sent), whether the request reached
    the upstream and got as far as its first token there, and the longest time the grader's own
    event loop was held up meanwhile."""

    status: int | None
    terminal: str
    token_times: tuple[float, ...]
    comment_times: tuple[float, ...]
    reached_upstream: bool
    grader_pause_s: float = 0.0


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)
    async with watch_loop() as watch:
        capture = await acapture_stream(ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=limit)
    record = await ctx.record(SEED, until=finished)
    return Observed(
        status=capture.status,
        terminal=capture.terminal,
        token_times=tuple(capture.token_times),
        comment_times=tuple(c.t for c in capture.comments),
        reached_upstream=record is not None and record.get("first_token_at") is not None,
        grader_pause_s=watch.worst_s,
    )


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the stream ends with ``[DONE]`` and a comment came inside the longest gap between
    tokens, at most LATEST_IN_GAP of the way through it. A gap under HIDDEN_SHARE of the
    upstream's silence: the stream was held back. Comments that came late while the grader's
    loop was held up over GRADER_PAUSE_S: inconclusive."""
    if not observed.reached_upstream:
        return result.never_reached({"status": observed.status})
    silence = _silence(list(observed.token_times))
    during: list[float] = []
    if silence is not None:
        silent_from, silent_until = silence
        latest = silent_from + LATEST_IN_GAP * (silent_until - silent_from)
        during = [t for t in observed.comment_times if silent_from < t <= latest]
    evidence = {
        "terminal": observed.terminal,
        "upstream_silence_ms": ms(STALL_S),
        "client_silence_ms": None if silence is None else ms(silence[1] - silence[0]),
        "comments_during_silence": len(during),
        "first_comment_after_ms": ms(during[0] - silence[0]) if during and silence else None,
        "comments_total": len(observed.comment_times),
    }
    if observed.status != 200 or observed.terminal != "done":
        return result.failed(
            "the stream did not survive the upstream's silence",
            evidence,
            "keep the stream open while the upstream is silent: no read timeout shorter than "
            "the silence, and forward the rest when it comes.",
        )
    if during:
        return result.passed("the proxy sends SSE comments while the upstream is silent", evidence)
    if silence is None or silence[1] - silence[0] < HIDDEN_SHARE * STALL_S:
        return result.failed(
            "no SSE comment arrived, and the client never saw the upstream's silence: the "
            "stream was held back and came out in one piece, silence included",
            evidence,
            "send each upstream event on as it arrives (trickle reports the holding back), "
            "then send heartbeats while the upstream is silent.",
        )
    late = [t - silence[0] for t in observed.comment_times if t > silence[0]]
    if late:
        evidence["late_comment_after_ms"] = ms(late[0])
        evidence["grader_pause_ms"] = ms(observed.grader_pause_s)
    if late and observed.grader_pause_s > GRADER_PAUSE_S:
        return result.inconclusive(
            "inconclusive: the grader paused while it timed the heartbeats",
            f"comments came {ms(late[0])} ms into the silence, but the grader's own event loop "
            f"was held up for {ms(observed.grader_pause_s)} ms meanwhile (more than "
            f"{ms(GRADER_PAUSE_S)} ms), so they may have waited for the grader, not the proxy",
            evidence,
        )
    return result.failed(
        "no SSE comment arrived while the upstream was silent",
        evidence,
        "while waiting for the next upstream event, send b': keep-alive\\n\\n' after at most "
        "3 s of silence (e.g. asyncio.timeout around the wait, as in the reference).",
    )
