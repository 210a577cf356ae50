"""``long_stream``: a slow first token and a long generation survive the proxy.

Experiment: the first token takes 6 s (longer than httpx's default 5 s timeout), then 120 tokens
at 40 tokens/s. Pass: the client gets every token and ``data: [DONE]`` (~9 s in all). A proxy
built on a bare ``httpx.AsyncClient()`` gives up at 5 s. ``observe`` runs it, ``judge`` decides
(tested in process: tests/checks/test_judges_long_stream.py). The client's read timeout,
LIMIT_S, stretches with the run's ``Budget``.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body, finished, ms
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "long_stream"
STEP = "07_heartbeats_and_timeouts"
SUMMARY = "a slow first token and a long stream survive"
BUDGET_S = 16.0
MOCK_ONLY = (
    "needs a first token slower than a client's default timeout, on demand, "
    "which only the mock's pacing gives"
)
LIMIT_S = 20.0  # the client's read timeout: past the upstream's longest silence
SEED = 4701
SCENARIO = {"ttft_ms": 6000, "tps": 40, "tokens": 120}

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Observed:
    """What the client saw (status, how the stream ended, its first token and its end in
    seconds since the request was sent; ``first_token`` None: no token came) and the mock's
    record of it (state and tokens made; None: it never reached the upstream)."""

    status: int | None
    terminal: str
    first_token: float | None
    total_time: float
    upstream_state: str | None
    upstream_tokens: int | None


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)
    capture = await acapture_stream(ctx.chat_url, json=chat_body(SEED, SCENARIO), timeout=limit)
    record = await ctx.record(SEED, until=finished)
    return Observed(
        status=capture.status,
        terminal=capture.terminal,
        first_token=capture.ttft,
        total_time=capture.total_time,
        upstream_state=None if record is None else record.get("state"),
        upstream_tokens=None if record is None else record.get("tokens_generated"),
    )


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: a 200 that ends with ``[DONE]``; the verdict says whether it failed before or
    after the first token."""
    evidence = {
        "status": observed.status,
        "terminal": observed.terminal,
        "client_first_token_ms": ms(observed.first_token),
        "client_total_ms": ms(observed.total_time),
        "upstream_state": observed.upstream_state,
        "upstream_tokens": observed.upstream_tokens,
    }
    if observed.status == 200 and observed.terminal == "done":
        return result.passed("a slow first token and a long generation reach the client", evidence)
    if observed.first_token is None:
        verdict = "the stream failed while the upstream was preparing its first token"
    else:
        verdict = "the stream failed before the generation finished"
    return result.failed(
        verdict,
        evidence,
        f"give every phase of the upstream client a limit of its own, with the read limit "
        f"longer than the longest silence a healthy upstream keeps (here a "
        f"{SCENARIO['ttft_ms'] / 1000:g} s first token): httpx's default of 5 s for each "
        "phase kills slow streams (notebook 07).",
    )
