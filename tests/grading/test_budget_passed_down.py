"""One ``Budget`` per grading, passed down: every stretched limit comes from the Budget its caller
gives, and nothing under labkit/ keeps (or reads) a process-wide reading of the machine. Below the
top level a budget is a required argument (no silent ``Budget.here()``); a class's grading
workers get their caller's budget on their command line; and every timeout inside a check
stretches with the run's budget."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import labkit
from labkit.capture import Capture
from labkit.checks import concurrency, machine, midstream_error, trickle, upstream_status
from labkit.checks.context import CheckContext
from labkit.checks.machine import Budget
from labkit.checks.sdk_stream import SdkStream
from labkit.grading import notebook_grader, roster, sandbox, worker
from labkit.grading.grader import agrade_file
from labkit.grading.network import Network
from labkit.grading.notebook_grader import (
    NOTEBOOK_BUDGET_S,
    START_BUDGET_S,
    notebook_time_limit_s,
)
from labkit.grading.notebook_parts import CHECK_TAG
from labkit.grading.report import SubmissionReport
from labkit.grading.rubric import Rubric
from labkit.grading.worker import WorkerOutcome

HALF = Budget(cpus=0.5)
PACKAGE = Path(labkit.__file__).parent
PROCESS_WIDE = re.compile(r"\bbudget_scale\b|functools\.(lru_)?cache|@(lru_)?cache\b")


def test_no_module_of_labkit_reads_a_process_wide_budget() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "budget_scale" in line
    ]
    assert found == [], "pass the grading's Budget down instead:\n" + "\n".join(found)
    text = Path(machine.__file__).read_text(encoding="utf-8")
    assert not PROCESS_WIDE.search(text), "machine.py must not cache a Budget for the process"
    assert not hasattr(machine, "budget_scale")


@pytest.fixture
def no_reading_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading this machine's CPUs fails: only the Budget passed down may set a limit."""

    def here() -> Budget:
        raise AssertionError("read the machine instead of the Budget passed down")

    monkeypatch.setattr(Budget, "here", staticmethod(here))


@pytest.mark.usefixtures("no_reading_here")
def test_the_rubric_s_time_limit_stretches_for_the_budget_it_is_given() -> None:
    rubric = Rubric()
    one = rubric.time_limit_s(budget=Budget(cpus=1.0))
    assert one == rubric.submission_timeout_s
    assert rubric.time_limit_s(budget=HALF) == 2 * one


@pytest.mark.usefixtures("no_reading_here")
def test_the_notebook_parts_limit_stretches_for_the_budget_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "08_graded.ipynb").write_text(f'{{"tags": ["{CHECK_TAG}"]}}', encoding="utf-8")
    (tmp_path / "09_not_graded.ipynb").write_text("{}", encoding="utf-8")
    one = notebook_time_limit_s(tmp_path, Budget(cpus=2.0))
    assert one == START_BUDGET_S + NOTEBOOK_BUDGET_S
    assert notebook_time_limit_s(tmp_path, HALF) == 2 * one


@pytest.mark.usefixtures("no_reading_here")
def test_a_grading_given_a_budget_reports_that_machine(tmp_path: Path) -> None:
    report = asyncio.run(agrade_file(tmp_path / "missing.py", only=["trickle"], budget=HALF))
    assert report.machine == "0.5 CPU: time budgets x2"


def test_concurrency_paces_its_streams_for_the_run_s_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bodies: list[dict[str, Any]] = []
    deadlines: list[float] = []

    class Stop(Exception):
        pass

    async def measure(
        ctx: CheckContext, streams: int, body: Any, deadline_s: float, *args: Any, **kw: Any
    ) -> None:
        bodies.append(body(0))
        deadlines.append(deadline_s)
        raise Stop

    monkeypatch.setattr(concurrency, "_measure", measure)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=HALF)
    monkeypatch.setattr(ctx.mock, "requests", list)  # no earlier burst: no wait before it
    with pytest.raises(Stop):
        asyncio.run(concurrency.observe(ctx))
    scenario = {k: v for k, v in bodies[0]["mock"].items() if k != "seed"}
    assert scenario == concurrency.scenario(HALF)
    assert scenario["tokens"] > concurrency.scenario(Budget(cpus=1.0))["tokens"]
    assert deadlines == [2 * concurrency.DEADLINE_S]


def test_budget_has_no_silent_fallback() -> None:
    """Bug: ``Budget.given_or_here`` measured the machine wherever a caller forgot to pass a
    budget, nine call sites deep. Fix: only the top level reads the machine."""
    assert not hasattr(Budget, "given_or_here")
    found = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "given_or_here" in line
    ]
    assert found == []


REQUIRED: list[Callable[..., Any]] = [
    Rubric.time_limit_s,
    notebook_time_limit_s,
    notebook_grader.notebook_rows,
    sandbox.start_proxy,
    CheckContext,
]


@pytest.mark.parametrize("function", REQUIRED, ids=[f.__qualname__ for f in REQUIRED])
def test_below_the_top_level_a_budget_is_required(function: Callable[..., Any]) -> None:
    parameter = inspect.signature(function).parameters["budget"]
    assert parameter.default is inspect.Parameter.empty


@pytest.mark.usefixtures("no_reading_here")
def test_a_class_s_worker_is_given_its_caller_s_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: the roster's worker read the machine again instead of grading for the budget its
    caller used (a class graded as if on half a CPU was graded for this machine in each worker).
    Fix: the roster passes the budget's CPUs (``--cpus``), the worker grades for them."""
    commands: list[list[str]] = []

    class Finished:
        returncode = 0

        def __init__(self, command: list[str], **kw: Any) -> None:
            commands.append(command)
            self.pid = 0

        def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
            report = SubmissionReport("alice", "proxy.py", [], Rubric(), None, 0.0)
            return WorkerOutcome("report", report=report.to_json()).to_json().encode(), b""

    monkeypatch.setattr(roster.subprocess, "Popen", Finished)
    submission = roster.Submission("alice", tmp_path / "proxy.py")
    roster.grade_in_worker(submission, Rubric(), only=["trickle"], budget=HALF)
    [command] = commands
    assert command[command.index("--cpus") + 1] == "0.5"

    given: list[Budget] = []

    async def graded(*args: Any, budget: Budget, **kw: Any) -> SubmissionReport:
        given.append(budget)
        return SubmissionReport("alice", "proxy.py", [], Rubric(), None, 0.0)

    monkeypatch.setattr(worker, "agrade_file", graded)
    monkeypatch.setattr(worker, "enter_own_namespace", lambda: Network(False, "a test"))
    arguments = command[command.index("labkit.grading.worker") + 1 :]
    assert worker.main(arguments) == 0
    assert given == [HALF]


def test_a_worker_started_without_a_budget_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        worker.main(["proxy.py"])
    assert exited.value.code == 2
    assert "--cpus" in capsys.readouterr().err


@pytest.mark.usefixtures("no_reading_here")
def test_trickle_s_read_timeout_stretches_with_the_run_s_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug: trickle's client gave up a read after a fixed 10 s, whatever the machine."""
    timeouts: list[float] = []

    async def capture(url: str, *, timeout: float, **kw: Any) -> Capture:  # noqa: ASYNC109
        timeouts.append(timeout)
        return Capture(url, status=200)

    async def no_record(seed: int, **kw: Any) -> None:
        return None

    monkeypatch.setattr(trickle, "acapture_stream", capture)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=HALF)
    monkeypatch.setattr(ctx, "record", no_record)
    asyncio.run(trickle.observe(ctx))
    assert timeouts == [2 * trickle.LIMIT_S]


@pytest.mark.usefixtures("no_reading_here")
@pytest.mark.parametrize("check", [midstream_error, upstream_status], ids=lambda m: m.ID)
def test_the_error_checks_limits_stretch_with_the_run_s_budget(
    check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: midstream_error and upstream_status gave every stream a fixed 5 s, where the other
    checks' limits stretched below one CPU."""
    limits: list[float] = []

    async def read(ctx: CheckContext, scenario: Any, seed: int, limit_s: float) -> SdkStream:
        limits.append(limit_s)
        return SdkStream("finished", 0, 0, "")

    async def capture(url: str, *, timeout: float, **kw: Any) -> Capture:  # noqa: ASYNC109
        limits.append(timeout)
        return Capture(url, status=200)

    monkeypatch.setattr(check, "read_with_sdk", read)
    if hasattr(check, "acapture_stream"):
        monkeypatch.setattr(check, "acapture_stream", capture)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=HALF)
    asyncio.run(check.observe(ctx))
    assert limits and set(limits) == {2 * check.LIMIT_S}
