"""Grade one submission: a ``proxy.py`` file, or a running proxy given by URL (black box).

For a file, ``agrade_file`` starts two mock upstreams and one proxy process per lane of checks
(see ``labkit.checks.catalogue``), all in a temporary directory, each proxy with the settings
its lane's checks need (``proxy_env_for``), sends one simple request to make sure the proxy
answers at all, then runs the lanes side by side. A lane whose checks need replicas
(``replicas_for``: ``resume_replica``, profile ``gateway``) gets that many proxies, each with
``REDIS_URL`` set to one private Redis of the grading's (``labkit.grading.replicas``), and one
usage log between them; without redis-server on the machine its checks are skipped, saying so.
Everything it started is stopped at the end, whatever happened. It never raises because of
what the submission does: every failure becomes a ``Problem`` or a failed check in the report.

With ``engine_url`` the upstream is a real engine instead (``labkit grade --engine``): one proxy
forwards to it, and the checks that need no mock run against it one after another (the engine is
one shared machine, not a mock per lane); the others are reported as not run, saying why
(``labkit.checks.runner``).

Run it through ``labkit grade`` (which runs it in a worker process with a stripped
environment, ``labkit.grading.worker``) to keep the instructor's secrets out of learner code and
to give the grading a network of its own (``labkit.grading.network``): the report's ``network``
says which network the grading had.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from labkit.capture import acapture_stream
from labkit.checks import CheckResult, arun_checks
from labkit.checks.catalogue import (
    BY_ID,
    SOLO_LANE,
    lanes_for,
    proxy_env_for,
    replicas_for,
    select,
)
from labkit.checks.context import UpstreamKind, chat_body
from labkit.checks.engine_books import EngineBooks
from labkit.checks.engine_requests import engine_body
from labkit.checks.gateway_advice import for_gateway
from labkit.checks.machine import Budget
from labkit.errors import CaptureError, MemoryLimitExceeded, RedisNotFoundError
from labkit.grading.isolation import Isolation, choose
from labkit.grading.network import Network, seen_from_here
from labkit.grading.replicas import REDIS_ENV, no_redis, start_shared_redis
from labkit.grading.report import Problem, SubmissionReport
from labkit.grading.rubric import Rubric
from labkit.grading.sandbox import SandboxedProxy, problem_from, start_proxy
from labkit.regions import Unwritten, unwritten
from labkit.servers import (
    RedisServer,
    ServerHandle,
    SubprocessServer,
    find_redis_server,
    serve_subprocess,
)
from mock_upstream import DEBUG_TOKEN_ENV

__all__ = [
    "PREFLIGHT_S",
    "UPSTREAM_TARGET",
    "agrade_file",
    "agrade_url",
    "needs_settings",
    "unwritten_results",
]

UPSTREAM_TARGET = "mock_upstream.served:app"
PREFLIGHT_S = 5.0
PREFLIGHT_SEED = 4001
NOT_RUN_HINT = "fix the problem above and grade again."
IN_PROCESS = (
    "graded in the caller's own process; `labkit grade` gives each grading a network "
    "namespace of its own"
)
URL_NETWORK = Network(False, "grading a URL: the proxy runs where it was started, not here")


def _not_run(ids: Iterable[str], verdict: str) -> list[CheckResult]:
    return [CheckResult(i, False, verdict, {}, NOT_RUN_HINT) for i in ids]


def needs_settings(ids: Iterable[str]) -> dict[str, CheckResult]:
    """Skipped results for the checks that need the proxy started with settings of the
    grader's (``Check.proxy_env``: notebook 15's grace period and replay bound). Graded by URL,
    the proxy runs with whatever settings it was started with, which the checks' bounds cannot
    assume."""
    results: dict[str, CheckResult] = {}
    for check_id in ids:
        env = BY_ID[check_id].proxy_env
        if not env:
            continue
        settings = " ".join(f"{name}={value}" for name, value in env.items())
        results[check_id] = CheckResult(
            check_id,
            False,
            f"not run by URL: needs the proxy started with {settings}",
            {},
            "grade the proxy file, which the grader starts with these settings.",
            skipped=True,
        )
    return results


def _step_number(notebook: str) -> int:
    digits = notebook[:2]
    return int(digits) if digits.isdigit() else 0


def unwritten_results(source: str, ids: Iterable[str]) -> dict[str, CheckResult]:
    """Failed results for the checks that need a part the learner has not written yet.

    A check taught in notebook N needs every part of notebooks 02..N; parts of later notebooks
    are off its path, or stand-ins that keep it working. The verdict names what is missing and
    where it is written, so nothing is run against a stub.
    """
    missing = unwritten(source)
    results: dict[str, CheckResult] = {}
    for check_id in ids:
        step = _step_number(BY_ID[check_id].step)
        needed: list[Unwritten] = [u for u in missing if _step_number(u.notebook) <= step]
        if not needed:
            continue
        first = needed[0]
        here = [u.function for u in needed if u.notebook == first.notebook]
        later = dict.fromkeys(u.notebook[:2] for u in needed if u.notebook != first.notebook)
        verdict = f"not written yet: {', '.join(here)} (notebook {first.notebook})"
        if later:
            verdict += f"; then parts of notebooks {', '.join(later)}"
        results[check_id] = CheckResult(
            check_id,
            False,
            verdict,
            {"unwritten": len(needed)},
            f"go back to notebook {first.notebook}, write {first.function} in its build-it "
            "cell, run that cell, then check again.",
        )
    return results


async def _preflight(
    proxy_url: str, budget: Budget, body: dict[str, Any] | None = None
) -> Problem | None:
    """One short stream (``body``, or three tokens from the mock): does the proxy answer?"""
    body = body or chat_body(PREFLIGHT_SEED, {"ttft_ms": 0, "tps": 1000, "tokens": 3})
    limit = budget.stretch(PREFLIGHT_S)
    try:
        async with asyncio.timeout(limit + 1):
            await acapture_stream(f"{proxy_url}/v1/chat/completions", json=body, timeout=limit)
    except (TimeoutError, CaptureError):
        return Problem(
            "no_answer",
            f"the proxy did not answer a simple streaming request within {limit:g} s. "
            "Make POST /v1/chat/completions return a response, then grade again.",
        )
    return None


async def _stop(servers: Iterable[ServerHandle]) -> None:
    await asyncio.gather(*(asyncio.to_thread(s.stop) for s in servers))


async def agrade_file(
    path: str | os.PathLike[str],
    rubric: Rubric | None = None,
    *,
    name: str | None = None,
    only: str | Iterable[str] | None = None,
    precheck: bool = True,
    engine_url: str | None = None,
    network: Network | None = None,
    budget: Budget | None = None,
) -> SubmissionReport:
    """Grade the proxy in ``path``; the report's ``name`` defaults to the file name.

    ``network``: the network this process (and so the grading) has, for the report, from
    ``labkit.grading.network.enter_own_namespace``; by default, what this process sees now.
    ``budget``: the machine every time limit of the grading is for. A top-level entry point:
    given none, it reads this machine once here (``Budget.here()``) and hands that down.

    With ``precheck`` (the default) a check that needs a part still stubbed in the file (see
    ``unwritten_results``) fails with a verdict naming that part, without being run. With
    ``engine_url`` the proxy forwards to that real engine (see the module docstring); raises
    ``EngineReadError`` if it does not answer.
    """
    rubric = rubric or Rubric()
    if budget is None:  # the top level: the one place this grading reads the machine
        budget = Budget.here()
    source = Path(path)
    ids = select(only)
    report_name = name or source.name
    started = time.monotonic()
    upstream = ""
    if engine_url is not None:
        engine_url = engine_url.rstrip("/")
        upstream = f"engine {await EngineBooks(engine_url).model()} at {engine_url}"

    isolation: Isolation | None = None
    network = network or seen_from_here(IN_PROCESS)

    def report(results: list[CheckResult], problem: Problem | None = None) -> SubmissionReport:
        return SubmissionReport(
            report_name,
            str(source),
            results,
            rubric,
            problem,
            time.monotonic() - started,
            isolation="" if isolation is None else isolation.describe(),
            network=network.describe(),
            machine=budget.describe(),
            upstream=upstream,
        )

    if not await asyncio.to_thread(source.is_file):
        missing = Problem("no_file", f"there is no file {source}. Check the path.")
        return report(_not_run(ids, "not run: there is no submission file"), missing)

    results: dict[str, CheckResult] = {}
    if precheck:
        text = await asyncio.to_thread(source.read_text, encoding="utf-8", errors="replace")
        results.update(unwritten_results(text, ids))
    to_run = tuple(i for i in ids if i not in results)
    if not to_run:
        return report([results[i] for i in ids])
    servers: list[ServerHandle] = []
    problem: Problem | None
    isolation = await asyncio.to_thread(choose)
    sandbox = Path(tempfile.mkdtemp(prefix="labkit-grade-"))
    limit = rubric.time_limit_s(ids, engine=engine_url is not None, budget=budget)
    try:
        async with asyncio.timeout(limit):
            if engine_url is None:
                problem = await _run_lanes(
                    source, sandbox, to_run, servers, results, isolation, budget
                )
            else:
                problem = await _run_on_engine(
                    source, sandbox, to_run, servers, results, isolation, budget, engine_url
                )
    except TimeoutError:
        problem = Problem(
            "submission_timeout",
            f"grading took longer than {limit:g} s and was stopped: "
            "the proxy stopped answering. Make every request end, then grade again.",
        )
    finally:
        await _stop(servers)
        await asyncio.to_thread(isolation.reap)
        shutil.rmtree(sandbox, ignore_errors=True)
    if problem is not None and not any(i in results for i in to_run):
        not_run = _not_run(to_run, "not run: the proxy could not be graded")
        ordered = sorted([*results.values(), *not_run], key=lambda r: ids.index(r.id))
        return report(ordered, problem)
    stopped = _not_run([i for i in ids if i not in results], "not run: grading was stopped")
    ordered = sorted([*results.values(), *stopped], key=lambda r: ids.index(r.id))
    return report(ordered, problem)


async def _run_lanes(
    source: Path,
    sandbox: Path,
    ids: tuple[str, ...],
    servers: list[ServerHandle],
    results: dict[str, CheckResult],
    isolation: Isolation,
    budget: Budget,
) -> Problem | None:
    """Start mocks (and a Redis, for replicas) and proxies, check the proxy answers, run the
    lanes. Fills ``results``."""
    submission = sandbox / "proxy.py"
    shutil.copyfile(source, submission)
    lanes = lanes_for(ids)
    replicated = [lane for lane in lanes if replicas_for(lane) > 1]
    if replicated:
        try:
            await asyncio.to_thread(find_redis_server)
        except RedisNotFoundError:
            results.update(no_redis(i for lane in replicated for i in lane))
            lanes, replicated = [lane for lane in lanes if lane not in replicated], []
    if not lanes:
        return None

    token = secrets.token_urlsafe(24)
    mock_env = {DEBUG_TOKEN_ENV: token}
    setup = await asyncio.gather(
        asyncio.to_thread(serve_subprocess, UPSTREAM_TARGET, cwd=sandbox, env=mock_env),
        asyncio.to_thread(serve_subprocess, UPSTREAM_TARGET, cwd=sandbox, env=mock_env),
        *([asyncio.to_thread(start_shared_redis)] if replicated else []),
        return_exceptions=True,
    )
    servers.extend(s for s in setup if isinstance(s, ServerHandle))
    for server in setup:
        if isinstance(server, BaseException):
            raise server  # our own setup failed, not the submission: the CLI exits with 2
    shared_mock, solo_mock = (m for m in setup if isinstance(m, SubprocessServer))
    redis = next((r for r in setup if isinstance(r, RedisServer)), None)

    def upstream_for(lane: tuple[str, ...]) -> SubprocessServer:
        return solo_mock if lane == SOLO_LANE else shared_mock

    def start(n: int, together: int = 1) -> SandboxedProxy:
        """A proxy for lane ``n``; a lane's replicas share its usage log and the Redis."""
        lane = lanes[n]
        settings = proxy_env_for(lane)
        if redis is not None and replicas_for(lane) > 1:
            settings = {**settings, REDIS_ENV: redis.url}
        return start_proxy(
            submission,
            upstream_url=upstream_for(lane).url,
            usage_log=sandbox / f"usage-{n}.jsonl",
            cwd=sandbox,
            isolation=isolation,
            together=together,
            budget=budget,
            settings=settings,
        )

    # One proxy first: a submission that spins at import or never answers then costs one
    # process for a few seconds, not one per lane.
    try:
        first = await asyncio.to_thread(start, 0)
    except Exception as exc:
        return problem_from(exc, source.name)
    servers.append(first)
    proxies: dict[int, list[SandboxedProxy]] = {0: [first]}
    problem = await _preflight(first.url, budget)
    if problem is not None:
        return problem
    # The other proxies (every lane's, each replica) start at once and share the CPUs, each
    # with a longer limit.
    rest = [n for n, lane in enumerate(lanes) for _ in range(replicas_for(lane))][1:]
    started = await asyncio.gather(
        *(asyncio.to_thread(start, n, len(rest)) for n in rest), return_exceptions=True
    )
    for n, proxy in zip(rest, started, strict=True):
        if isinstance(proxy, SandboxedProxy):
            proxies.setdefault(n, []).append(proxy)
            servers.append(proxy)
    failures = [p for p in started if isinstance(p, BaseException)]
    if failures:
        return problem_from(failures[0], source.name)

    async def run_lane(n: int, lane: tuple[str, ...], replicas: list[SandboxedProxy]) -> None:
        proxy, *others = replicas
        for result in await arun_checks(
            proxy.url,
            upstream_url=upstream_for(lane).url,
            usage_log=sandbox / f"usage-{n}.jsonl",
            only=lane,
            proxy_pid=proxy.server_pid,
            upstream_token=token,
            budget=budget,
            replica_url=others[0].url if others else None,
        ):
            results[result.id] = result

    await asyncio.gather(*(run_lane(n, lane, proxies[n]) for n, lane in enumerate(lanes)))
    if any(p.memory_exceeded() for replicas in proxies.values() for p in replicas):
        limit = isolation.limits.memory_bytes // (1024 * 1024)
        return Problem(
            MemoryLimitExceeded.kind,
            f"the proxy was stopped: it held more than {limit} MiB of memory (the limit for "
            "one proxy process). Keep what it holds bounded, then grade again.",
        )
    return None


async def _run_on_engine(
    source: Path,
    sandbox: Path,
    ids: tuple[str, ...],
    servers: list[ServerHandle],
    results: dict[str, CheckResult],
    isolation: Isolation,
    budget: Budget,
    engine_url: str,
) -> Problem | None:
    """One proxy forwarding to the engine; the checks one after another. Fills ``results``."""
    submission = sandbox / "proxy.py"
    shutil.copyfile(source, submission)
    log = sandbox / "usage-engine.jsonl"
    try:
        proxy = await asyncio.to_thread(
            start_proxy,
            submission,
            upstream_url=engine_url,
            usage_log=log,
            cwd=sandbox,
            isolation=isolation,
            budget=budget,
        )
    except Exception as exc:
        return problem_from(exc, source.name)
    servers.append(proxy)
    model = await EngineBooks(engine_url).model()
    problem = await _preflight(proxy.url, budget, engine_body(model, max_tokens=3))
    if problem is not None:
        return problem
    for result in await arun_checks(
        proxy.url,
        upstream_url=engine_url,
        usage_log=log,
        only=ids,
        proxy_pid=proxy.server_pid,
        upstream="engine",
        budget=budget,
    ):
        results[result.id] = result
    if proxy.memory_exceeded():
        limit = isolation.limits.memory_bytes // (1024 * 1024)
        return Problem(
            MemoryLimitExceeded.kind,
            f"the proxy was stopped: it held more than {limit} MiB of memory (the limit for "
            "one proxy process). Keep what it holds bounded, then grade again.",
        )
    return None


async def agrade_url(
    proxy_url: str,
    upstream_url: str,
    rubric: Rubric | None = None,
    *,
    only: str | Iterable[str] | None = None,
    upstream: UpstreamKind = "mock",
    budget: Budget | None = None,
    replica_url: str | None = None,
) -> SubmissionReport:
    """Grade a running proxy as a black box. ``usage`` is skipped (no usage log to read), so
    are the checks that need the proxy started with settings of the grader's
    (``needs_settings``), and each failure's advice is for a gateway
    (``labkit.checks.gateway_advice``). ``replica_url``: a second replica of the same proxy,
    sharing its replay log, for ``resume_replica`` (skipped without one, saying so).

    ``upstream_url`` is the mock the proxy forwards to, or with ``upstream="engine"`` the real
    engine (raises ``EngineReadError`` if it does not answer). ``budget``: the machine the time
    limits are for; a top-level entry point, given none it reads this machine once here
    (``Budget.here()``)."""
    rubric = rubric or Rubric()
    if budget is None:  # the top level: the one place this grading reads the machine
        budget = Budget.here()
    ids = select(only)
    started = time.monotonic()
    proxy_url = proxy_url.rstrip("/")
    body, described = None, ""
    if upstream == "engine":
        model = await EngineBooks(upstream_url).model()
        body, described = engine_body(model, max_tokens=3), f"engine {model} at {upstream_url}"
    problem = await _preflight(proxy_url, budget, body)
    limit = rubric.time_limit_s(ids, engine=upstream == "engine", budget=budget)
    if problem is not None:
        results = _not_run(ids, "not run: the proxy could not be graded")
    else:
        unsettled = needs_settings(ids)
        to_run = [i for i in ids if i not in unsettled]
        try:
            async with asyncio.timeout(limit):
                checked = await arun_checks(
                    proxy_url,
                    upstream_url=upstream_url,
                    only=to_run,
                    upstream=upstream,
                    budget=budget,
                    replica_url=replica_url,
                )
            # whatever is graded by URL may be any gateway: no advice in the lab's Python
            ran = {r.id: for_gateway(r) for r in checked}
            results = [ran.get(i) or unsettled[i] for i in ids]
        except TimeoutError:
            problem = Problem(
                "submission_timeout",
                f"grading took longer than {limit:g} s and was stopped.",
            )
            results = _not_run(ids, "not run: grading was stopped")
    return SubmissionReport(
        proxy_url,
        proxy_url,
        results,
        rubric,
        problem,
        time.monotonic() - started,
        network=URL_NETWORK.describe(),
        machine=budget.describe(),
        upstream=described,
    )
