"""What every check needs: where the proxy and its upstream are, and how to read the upstream.

The upstream is the mock (``upstream="mock"``, the default) or a real engine (``"engine"``).
Each request a check sends the mock carries its own ``seed`` in the body's ``mock`` field (a
proxy must forward the body; it may drop headers). The mock keeps that scenario in its record,
so a check finds *its* record among concurrent ones, even for a request cancelled before any
chunk (and so before the client saw a completion id). An engine keeps no such records: a check
reads its counters (``ctx.books``, ``labkit.checks.engine_books``) while it runs alone on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from labkit.checks.engine_books import READ_TIMEOUT_S, EngineBooks
from labkit.checks.machine import Budget
from labkit.checks.result import INCONCLUSIVE, CheckResult, Evidence
from labkit.upstream import MockUpstream, chat_request

__all__ = ["CheckContext", "Outcome", "Record", "UpstreamKind", "chat_body", "finished", "ms"]

Record = dict[str, Any]
UpstreamKind = Literal["mock", "engine"]
MOCK_TIMEOUT_S = 15.0
POLL_S = 0.05
RECORD_WAIT_S = 1.0  # at one CPU: how long ``record`` waits, unless told
INCONCLUSIVE_ADVICE = (
    "the grader's machine was too slow for this experiment, so it was left out of the score: "
    "grade again on a machine (or container) with at least one full CPU."
)
PROMPT = "Tell me how a streaming proxy keeps tokens flowing."


def chat_body(
    seed: int,
    scenario: Mapping[str, object],
    *,
    stream: bool = True,
    include_usage: bool = False,
) -> dict[str, Any]:
    """An OpenAI chat request whose ``mock`` field sets the scenario and tags it with ``seed``
    (``labkit.upstream.chat_request``, with the checks' prompt)."""
    return chat_request(seed, prompt=PROMPT, usage=include_usage, stream=stream, **scenario)


@dataclass
class CheckContext:
    """One check run: the proxy under test, the upstream behind it (the mock, or a real
    engine when ``upstream == "engine"``), and the time ``budget`` the machine allows (required,
    by keyword: the caller's, handed down; a check never reads the machine itself).
    ``replica_url`` is a second replica of the same proxy sharing its replay log (``REDIS_URL``),
    for ``resume_replica``; its usage lines go to ``usage_log`` too."""

    proxy_url: str
    upstream_url: str
    usage_log: Path | None = None
    proxy_pid: int | None = None
    upstream_token: str | None = None  # the mock's debug token, if it keeps its records secret
    started_at: float = field(default_factory=time.time)
    upstream: UpstreamKind = "mock"
    replica_url: str | None = None
    budget: Budget = field(kw_only=True)  # the run's, handed down: never read here

    def __post_init__(self) -> None:
        self.proxy_url = self.proxy_url.rstrip("/")
        self.upstream_url = self.upstream_url.rstrip("/")
        if self.replica_url is not None:
            self.replica_url = self.replica_url.rstrip("/")
        # A mock streaming flat out for ``backpressure`` on a starved machine can take seconds
        # to answer: wait for its books longer than a learner's client would (and longer still
        # below one CPU, as every limit of the run).
        self.mock = MockUpstream(
            self.upstream_url,
            token=self.upstream_token,
            timeout_s=self.budget.stretch(MOCK_TIMEOUT_S),
        )
        self._books = (
            EngineBooks(self.upstream_url, self.budget.stretch(READ_TIMEOUT_S))
            if self.upstream == "engine"
            else None
        )

    @property
    def books(self) -> EngineBooks:
        """The engine's own counters (an engine run only)."""
        if self._books is None:
            raise TypeError("this check runs against the mock: read ctx.mock, not ctx.books")
        return self._books

    @property
    def chat_url(self) -> str:
        return f"{self.proxy_url}/v1/chat/completions"

    @property
    def sdk_base_url(self) -> str:
        return f"{self.proxy_url}/v1"

    async def records(self) -> list[Record]:
        """The mock's records from this run (older ones are ignored)."""
        records = await asyncio.to_thread(self.mock.requests)
        return [r for r in records if r.get("started_at", 0.0) >= self.started_at - 1.0]

    async def record(
        self,
        seed: int,
        *,
        until: Callable[[Record], bool] = lambda record: True,
        wait_s: float | None = None,
    ) -> Record | None:
        """The newest record tagged ``seed``, once ``until`` holds (or as it is after ``wait_s``
        seconds; None: RECORD_WAIT_S stretched with the run's budget).

        None if the request never reached the upstream.
        """
        if wait_s is None:
            wait_s = self.budget.stretch(RECORD_WAIT_S)
        deadline = time.monotonic() + wait_s
        while True:
            # A look begun after the deadline is the record as it is then: on a loaded machine
            # one look can take seconds, and a look begun before the deadline but answered after
            # it would give an old state (still running) as the last word.
            looked_at = time.monotonic()
            found = [r for r in await self.records() if r.get("scenario", {}).get("seed") == seed]
            record = found[-1] if found else None
            if (record is not None and until(record)) or looked_at >= deadline:
                return record
            await asyncio.sleep(POLL_S)


def finished(record: Record) -> bool:
    """Whether the request is over (not waiting in the mock's queue, not running)."""
    return record.get("state") not in ("queued", "running")


@dataclass(frozen=True)
class Outcome:
    """Builds the results of one check, so verdicts and hints stay next to each other."""

    id: str
    step: str

    def passed(self, verdict: str, evidence: Evidence, *, warning: str = "") -> CheckResult:
        """A pass; ``warning`` (no digits) says what else was seen, e.g. sends held back."""
        assert not any(c.isdigit() for c in warning), warning
        hint = f"see {self.step}"
        return CheckResult(self.id, True, verdict, _rounded(evidence), hint, warning=warning)

    def failed(
        self, verdict: str, evidence: Evidence, advice: str, *, step: str | None = None
    ) -> CheckResult:
        hint = f"{step or self.step}: {advice}"
        return CheckResult(self.id, False, verdict, _rounded(evidence), hint)

    def never_reached(self, evidence: Evidence) -> CheckResult:
        """The fail of a request the upstream never saw: the forwarding of notebook 02."""
        return self.failed(
            "the request never reached the upstream",
            evidence,
            "forward POST /v1/chat/completions to the upstream with its JSON body.",
            step="02_forwarding_proxy",
        )

    def skipped(self, verdict: str, advice: str) -> CheckResult:
        return CheckResult(self.id, False, verdict, {}, advice, skipped=True)

    def inconclusive(
        self, verdict: str, reason: str, evidence: Evidence, advice: str = ""
    ) -> CheckResult:
        """Run, but not decided: the machine was too slow. Left out of the score like a skip;
        ``reason`` (measured numbers welcome) goes first in the evidence."""
        assert verdict.startswith("inconclusive:"), verdict
        hint = advice or INCONCLUSIVE_ADVICE
        evidence = {INCONCLUSIVE: reason, **_rounded(evidence)}
        return CheckResult(self.id, False, verdict, evidence, hint, skipped=True)


def _rounded(evidence: Evidence) -> Mapping[str, float | int | str | bool | None]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in evidence.items()}


def ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)
