"""One ``Budget`` per grading, passed down: every stretched limit comes from the Budget its caller
gives, and nothing under labkit/ keeps (or reads) a process-wide reading of the machine."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

import labkit
from labkit.checks import concurrency, machine
from labkit.checks.context import CheckContext
from labkit.checks.machine import Budget
from labkit.grading.grader import agrade_file
from labkit.grading.notebook_grader import (
    NOTEBOOK_BUDGET_S,
    START_BUDGET_S,
    notebook_time_limit_s,
)
from labkit.grading.notebook_parts import CHECK_TAG
from labkit.grading.rubric import Rubric

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

    class Stop(Exception):
        pass

    async def measure(ctx: CheckContext, streams: int, body: Any, *args: Any, **kw: Any) -> None:
        bodies.append(body(0))
        raise Stop

    monkeypatch.setattr(concurrency, "_measure", measure)
    ctx = CheckContext("http://127.0.0.1:9", "http://127.0.0.1:9", budget=HALF)
    monkeypatch.setattr(ctx.mock, "requests", list)  # no earlier burst: no wait before it
    with pytest.raises(Stop):
        asyncio.run(concurrency.check_concurrency(ctx))
    scenario = {k: v for k, v in bodies[0]["mock"].items() if k != "seed"}
    assert scenario == concurrency.scenario(HALF.scale)
    assert scenario["tokens"] > concurrency.scenario(1.0)["tokens"]
