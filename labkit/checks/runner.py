"""Run checks against a running proxy: ``arun_checks`` (async) and ``run_checks`` (blocking).

Every check gets its time budget; a check that runs out of it, or cannot reach the proxy, or
trips over something unexpected, still returns a failed ``CheckResult`` with a plain verdict:
running checks never raises because of what the proxy did. Budgets only guard against a proxy
that never answers; below one CPU (a small container) they are stretched by the run's
``machine.Budget`` (twice as long at half a CPU), so a slow machine is not mistaken for a proxy
that stopped answering.

The ``backpressure`` lane drives its upstream flat out. On a machine with cores to spare it may
run beside the other lanes (the grader runs one ``arun_checks`` per lane, side by side in one
event loop, each with a mock of its own). Below ALONE_BELOW_CPUS its full-speed mock would take
the CPU from the timed experiments running beside it and stretch their probes and heartbeats by
seconds, so by default (``exclusive=True``) it waits until no timed lane of any ``arun_checks``
in the same event loop is running: ``TIMED_LANES`` is where they say so.

Against a real engine (``upstream="engine"``) the checks that have an engine experiment run one
after another, each once the engine has no request running (it waits up to
ENGINE_IDLE_BEFORE_S for what a broken proxy left going), because each reads the engine's
counters as its own. The others come back skipped, their verdict saying why only the mock can
run them. An engine that does not show its books in time makes a check inconclusive, as a mock
that does not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from labkit.checks.catalogue import BY_ID, SOLO_LANE, Check, lanes_for, select
from labkit.checks.context import CheckContext, Outcome, UpstreamKind
from labkit.checks.machine import Budget
from labkit.checks.result import INCONCLUSIVE, CheckResult
from labkit.errors import CaptureError, EngineReadError, MockUpstreamError

__all__ = ["TIMED_LANES", "TimedLanes", "arun_checks", "run_checks"]

REACH_STEP = "02_forwarding_proxy"
ALONE_BELOW_CPUS = 2.0  # on fewer CPUs, the flat-out lane runs after the others
ATTEMPTS = 2  # an inconclusive check is run once more before it is reported as such
ENGINE_IDLE_BEFORE_S = 40.0  # what a broken proxy left running on the engine, finishing
MOCK_ONLY_HINT = "grade without --engine to run it against the mock upstream."


class TimedLanes:
    """The lanes of timed checks running in each event loop, so that a flat-out lane can wait
    for them to end.

    Two check runs sharing a small machine distort each other's timing: a mock streaming flat
    out for ``backpressure`` takes the CPU that another lane's probes and heartbeats are timed
    on. Every ``arun_checks`` registers its timed lanes here while they run (``running``);
    with ``exclusive=True`` its flat-out lane first waits for all of them (``wait_idle``),
    its own and other calls' alike. Kept per event loop, since only lanes in one loop can wait
    for each other; a loop that ends takes its entry with it."""

    def __init__(self) -> None:
        self._running: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, set[asyncio.Future[None]]
        ] = weakref.WeakKeyDictionary()

    def _here(self) -> set[asyncio.Future[None]]:
        return self._running.setdefault(asyncio.get_running_loop(), set())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Count the lanes run inside this block as running in the current event loop."""
        done = asyncio.get_running_loop().create_future()
        self._here().add(done)
        try:
            yield
        finally:
            done.set_result(None)
            self._here().discard(done)

    async def wait_idle(self) -> None:
        """Return once no timed lane runs in the current event loop."""
        await asyncio.sleep(0)  # lanes started together with the caller register first
        while pending := [f for f in self._here() if not f.done()]:
            await asyncio.wait(pending)


# One for the process: what it guards is the machine's CPU, which every check run shares.
TIMED_LANES = TimedLanes()


async def run_one(check: Check, ctx: CheckContext) -> CheckResult:
    """Run one check within its budget; turn anything unexpected into a failed result.

    A check that comes out inconclusive (the machine paused, the mock was too busy) is run
    again, up to ATTEMPTS times in all: a pause of a second or two on a shared machine rarely
    strikes twice, and a verdict is worth more than an honest shrug (a check whose module
    says ``RETRY_INCONCLUSIVE = False`` runs once). The evidence of a result
    that took more than one attempt says how many (``attempts``) and why the first did not
    count (``first_attempt``)."""
    result = await _attempt(check, ctx)
    attempts = 1
    first = result
    while result.inconclusive and check.retry_inconclusive and attempts < ATTEMPTS:
        result = await _attempt(check, ctx)
        attempts += 1
    if attempts == 1:
        return result
    reason = str(first.evidence.get(INCONCLUSIVE, ""))[:300]
    return replace(
        result, evidence={**result.evidence, "attempts": attempts, "first_attempt": reason}
    )


async def _attempt(check: Check, ctx: CheckContext) -> CheckResult:
    machine = ctx.budget
    run, budget_s = check.run, machine.stretch(check.budget_s)
    if ctx.upstream == "engine":
        run, budget_s = check.run_on_engine, machine.stretch(check.engine_budget_s)
        busy = await _engine_busy(check, ctx)
        if busy is not None:
            return busy
    try:
        async with asyncio.timeout(budget_s) as budget:
            return await run(ctx)
    except TimeoutError:
        if not budget.expired():
            raise
        return CheckResult(
            check.id,
            False,
            "the check ran out of time: the proxy stopped answering",
            {"budget_s": budget_s}
            if machine.scale == 1
            else {"budget_s": budget_s, "cpus": machine.cpus},
            f"{check.step}: make sure every request gets a response and every stream ends "
            "(heartbeats alone never end a stream).",
        )
    except MockUpstreamError as exc:
        # The grader's own mock upstream was too busy to show its books (a flat-out stream on
        # a starved machine): nothing the proxy did, so never a FAIL.
        return Outcome(check.id, check.step).inconclusive(
            "inconclusive: the grader's mock upstream did not answer in time",
            f"{exc}"[:300],
            {"cpus": machine.cpus},
        )
    except EngineReadError as exc:
        return Outcome(check.id, check.step).inconclusive(
            "inconclusive: the engine did not show its own numbers in time",
            f"{exc}"[:300],
            {"cpus": machine.cpus},
        )
    except CaptureError as exc:
        return CheckResult(
            check.id,
            False,
            "the proxy could not be reached",
            {"error": exc.error},
            f"{REACH_STEP}: start the proxy and serve POST /v1/chat/completions on its URL.",
        )
    except Exception as exc:
        return CheckResult(
            check.id,
            False,
            "the check could not run against this proxy",
            {"error": f"{type(exc).__name__}: {exc}"[:300]},
            f"{REACH_STEP}: answer with an OpenAI-style stream (text/event-stream, data: lines).",
        )


async def _engine_busy(check: Check, ctx: CheckContext) -> CheckResult | None:
    """None once the engine runs no request; an inconclusive result if it still does after
    ENGINE_IDLE_BEFORE_S, stretched with the run's budget (someone else is using it)."""
    waited_s = ctx.budget.stretch(ENGINE_IDLE_BEFORE_S)
    try:
        idle = await ctx.books.wait_idle(waited_s)
    except EngineReadError as exc:
        return Outcome(check.id, check.step).inconclusive(
            "inconclusive: the engine did not show its own numbers in time", f"{exc}"[:300], {}
        )
    if idle is not None:
        return None
    return Outcome(check.id, check.step).inconclusive(
        "inconclusive: the engine was busy with requests that were not the check's",
        f"the engine still ran requests after {waited_s:g} s of waiting: a check "
        "reads the engine's counters as its own, so it needs the engine to itself",
        {},
        "grade against an engine nothing else uses (labkit grade --engine starts one).",
    )


def _not_on_engine(check: Check) -> CheckResult:
    return Outcome(check.id, check.step).skipped(
        f"not run on the engine: {check.mock_only}", MOCK_ONLY_HINT
    )


async def arun_checks(
    proxy_url: str,
    *,
    upstream_url: str,
    usage_log: str | Path | None = None,
    only: str | Iterable[str] | None = None,
    proxy_pid: int | None = None,
    upstream_token: str | None = None,
    upstream: UpstreamKind = "mock",
    exclusive: bool = True,
    budget: Budget | None = None,
    replica_url: str | None = None,
) -> list[CheckResult]:
    """Run the checks (all, or ``only`` these ids) against the proxy at ``proxy_url``.

    ``upstream_url`` is the upstream the proxy forwards to: the mock (the checks read its
    records), or with ``upstream="engine"`` a real engine (the checks read its counters; those
    that need the mock come back skipped, saying why). ``usage_log`` is the file the proxy
    appends usage lines to (``usage`` is skipped without it); ``proxy_pid`` the process serving
    the proxy (``backpressure`` then reports its memory); ``upstream_token`` the mock's debug
    token, where it asks for one. Lanes of checks run side by side, ``backpressure`` last; on
    the engine, one check at a time. Results come in catalogue order.

    ``exclusive`` (the default) keeps concurrent check runs from distorting each other's
    timing: below ALONE_BELOW_CPUS, ``backpressure``'s flat-out lane starts only once no timed
    lane of any ``arun_checks`` in this event loop is running (``TIMED_LANES``). Pass False
    to run it as soon as this call's own lanes end, whatever else runs.

    ``budget`` is the machine the time limits are for. This is a top-level entry point: given
    none, it reads this process's CPUs once (``Budget.here()``) and hands that Budget down to
    every check; nothing below it reads the machine.

    ``replica_url`` is a second replica of the proxy sharing its replay log (``REDIS_URL``),
    for ``resume_replica`` (skipped without one); give both replicas one ``usage_log``.
    """
    ids = select(only)
    if budget is None:  # the top level: the one place a check run reads the machine
        budget = Budget.here()
    ctx = CheckContext(
        proxy_url,
        upstream_url,
        usage_log=None if usage_log is None else Path(usage_log),
        proxy_pid=proxy_pid,
        upstream_token=upstream_token,
        upstream=upstream,
        budget=budget,
        replica_url=replica_url,
    )
    results: dict[str, CheckResult] = {}
    if upstream == "engine":
        for check in (BY_ID[i] for i in ids):
            if not check.on_engine:
                results[check.id] = _not_on_engine(check)
            else:
                results[check.id] = await run_one(check, ctx)
        return [results[i] for i in ids]

    async def run_lane(lane: tuple[str, ...]) -> None:
        for check_id in lane:
            results[check_id] = await run_one(BY_ID[check_id], ctx)

    lanes = lanes_for(ids)
    others = [lane for lane in lanes if lane != SOLO_LANE]
    if others:
        async with TIMED_LANES.running():
            await asyncio.gather(*(run_lane(lane) for lane in others))
    if SOLO_LANE in lanes:  # its upstream runs flat out: alone, so it slows nobody down
        if exclusive and ctx.budget.cpus < ALONE_BELOW_CPUS:
            await TIMED_LANES.wait_idle()
        await run_lane(SOLO_LANE)
    return [results[i] for i in ids]


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _parameters_of(
    model: Callable[_P, Coroutine[Any, Any, _T]],
) -> Callable[[Callable[..., _T]], Callable[_P, _T]]:
    """Give the decorated function ``model``'s parameters, for type checkers and ``help()``:
    a blocking twin that passes everything on cannot drift from its async original."""

    def give(function: Callable[..., _T]) -> Callable[_P, _T]:
        return functools.update_wrapper(function, model, assigned=(), updated=())

    return give


@_parameters_of(arun_checks)
def run_checks(*args: Any, **kwargs: Any) -> list[CheckResult]:
    """Blocking ``arun_checks``, with the same parameters. Runs on a helper thread, so it works
    inside a Jupyter kernel, whose event loop is already running."""
    coroutine = arun_checks(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="labkit-checks") as pool:
        return pool.submit(asyncio.run, coroutine).result()
