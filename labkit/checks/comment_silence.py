"""``keepalive_under_comments``: an upstream's SSE comments never leave the client in silence.

Some upstreams keep a waiting connection busy with comments of their own (OpenRouter sends
``: OPENROUTER PROCESSING`` while a request waits for its first token). A proxy may pass them on
(they are comments to the client too) or drop them, but one that takes each comment off its
queue as a sign of life, so that no heartbeat is due, and then drops it, leaves its client with
no byte at all until the first token: a load balancer's idle timeout (60 s on many) then cuts the
stream the heartbeats were meant to keep alive.

Experiment: the first token is due after FIRST_TOKEN_S (6 s) and the upstream sends a comment
every COMMENT_EVERY_MS (500 ms) meanwhile, then a short answer. The client's silence is the
longest wait for a byte, from the request to the stream's end (the wait for the headers
included). Pass: the stream ends with ``[DONE]`` and that silence is at most MAX_SILENCE_S: the
lab's latest heartbeat (3 s) and a second's margin. A proxy that passes the comments on leaves
gaps of about half a second, one that sends its own heartbeats 2 s; one that drops the comments
and counts them as activity leaves the whole 6 s, as does one that holds the stream back.

Timing is the client's, in the grader's event loop: if that loop was held up for more than
GRADER_PAUSE_S meanwhile, a long silence may be the grader's, so the result is inconclusive (and
run again). ``observe`` runs the experiment; ``judge`` decides, and is tested on constructed
observations in process (tests/checks/test_judges_comment_silence.py). The client's read limit,
LIMIT_S, stretches with the run's ``Budget``; MAX_SILENCE_S does not.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.loop_watch import watch_loop
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "keepalive_under_comments"
STEP = "07_heartbeats_and_timeouts"
SUMMARY = "an upstream's SSE comments never leave the client silent for long"
MOCK_ONLY = (
    "needs an upstream that sends SSE comments before a slow first token, "
    "which only the mock's pacing gives"
)
SEED = 6401
FIRST_TOKEN_S = 6.0
COMMENT_EVERY_MS = 500
SCENARIO = {
    "ttft_ms": int(FIRST_TOKEN_S * 1000),
    "tps": 20,
    "tokens": 10,
    "comment_every_ms": COMMENT_EVERY_MS,
}
MAX_SILENCE_S = 4.0  # the contract's latest heartbeat (3 s), and a second's margin
GRADER_PAUSE_S = 1.0
BUDGET_S = 16.0
LIMIT_S = 14.0  # the client's own deadline for each read

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """What the client saw: its status and ending, when its bytes arrived (seconds since the
    request was sent: the headers, then each read), how many comments it got, whether the
    request reached the upstream, and the longest hold-up of the grader's own loop."""

    status: int | None
    terminal: str
    arrivals: tuple[float, ...]
    comments: int
    reached_upstream: bool
    grader_pause_s: float = 0.0


def longest_silence(arrivals: tuple[float, ...]) -> float | None:
    """The longest wait for a byte, counted from the request (time 0); None if no byte came."""
    if not arrivals:
        return None
    times = (0.0, *sorted(arrivals))
    return max(later - earlier for earlier, later in itertools.pairwise(times))


async def observe(ctx: CheckContext) -> Observed:
    async with watch_loop() as watch:
        capture = await acapture_stream(
            ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=ctx.budget.stretch(LIMIT_S)
        )
    record = await ctx.record(SEED, until=finished)
    arrivals = [c.t for c in capture.chunks]
    if capture.headers_at is not None:
        arrivals.append(capture.headers_at)
    return Observed(
        status=capture.status,
        terminal=capture.terminal,
        arrivals=tuple(arrivals),
        comments=len(capture.comments),
        reached_upstream=record is not None,
        grader_pause_s=watch.worst_s,
    )


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the stream ended with ``[DONE]`` and the client never waited more than
    MAX_SILENCE_S for a byte. A longer wait while the grader's loop was held up for more than
    GRADER_PAUSE_S: inconclusive."""
    if not observed.reached_upstream:
        return result.never_reached({"status": observed.status})
    silence = longest_silence(observed.arrivals)
    evidence = {
        "terminal": observed.terminal,
        "client_longest_silence_ms": ms(silence),
        "allowed_silence_ms": ms(MAX_SILENCE_S),
        "upstream_first_token_ms": ms(FIRST_TOKEN_S),
        "upstream_comment_every_ms": COMMENT_EVERY_MS,
        "comments_received": observed.comments,
    }
    if observed.status != 200 or observed.terminal != "done" or silence is None:
        return result.failed(
            "a stream whose upstream sent SSE comments before its first token did not end normally",
            evidence,
            "read comment events as events that carry no data (pass them on, or drop them), "
            "and keep the stream open until the upstream's data: [DONE].",
        )
    if silence <= MAX_SILENCE_S:
        return result.passed(
            "the client is never silent for long while the upstream sends SSE comments", evidence
        )
    if observed.grader_pause_s > GRADER_PAUSE_S:
        evidence["grader_pause_ms"] = ms(observed.grader_pause_s)
        return result.inconclusive(
            "inconclusive: the grader paused while it timed the client's silence",
            f"the client waited {ms(silence)} ms for a byte, but the grader's own event loop was "
            f"held up for {ms(observed.grader_pause_s)} ms meanwhile",
            evidence,
        )
    return result.failed(
        "the client heard nothing for longer than a heartbeat while the upstream sent SSE comments",
        evidence,
        "time heartbeats from the last bytes the client was sent: pass an upstream comment on "
        "to the client as a comment, or do not count it as activity.",
    )
