"""One shape for a check: every module of ``labkit.checks`` that defines ``ID`` exports the same
names (``catalogue.SHAPE``, and an engine experiment or ``MOCK_ONLY``), and the catalogue is
built from exactly those modules, with the ids, order, steps, lanes and budgets it had before it
was built from them (issue 46: verdicts must not change)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from dataclasses import is_dataclass
from typing import get_type_hints

import pytest

import labkit.checks
from labkit.checks import catalogue
from labkit.checks.catalogue import (
    ALL_IDS,
    CHECK_IDS,
    CHECKS,
    ENGINE_IDS,
    ENGINE_SHAPE,
    GATEWAY_CHECKS,
    LANES,
    SHAPE,
    Check,
)
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult


def check_modules() -> list[types.ModuleType]:
    """Every module of ``labkit.checks`` that defines ``ID``: a check of its own."""
    found = []
    for info in pkgutil.iter_modules(labkit.checks.__path__):
        module = importlib.import_module(f"labkit.checks.{info.name}")
        if "ID" in vars(module):
            found.append(module)
    return found


MODULES = check_modules()


def test_every_module_that_defines_an_id_is_in_the_catalogue_once() -> None:
    catalogued = [check.id for check in CHECKS + GATEWAY_CHECKS]
    assert sorted(m.ID for m in MODULES) == sorted(catalogued)
    assert len(set(catalogued)) == len(catalogued)


def test_no_private_module_defines_a_check() -> None:
    assert [m.__name__ for m in MODULES if m.__name__.rsplit(".", 1)[1].startswith("_")] == []


@pytest.mark.parametrize("module", MODULES, ids=[m.ID for m in MODULES])
def test_every_check_module_has_the_whole_shape(module: types.ModuleType) -> None:
    for name in SHAPE:
        assert hasattr(module, name), f"{module.__name__} lacks {name}"
    engine = [hasattr(module, name) for name in ENGINE_SHAPE]
    assert all(engine) or not any(engine), f"{module.__name__}: half an engine experiment"
    assert all(engine) != hasattr(module, "MOCK_ONLY"), module.__name__
    assert isinstance(module.ID, str) and isinstance(module.STEP, str)
    assert isinstance(module.SUMMARY, str) and module.SUMMARY
    assert isinstance(module.BUDGET_S, float) and module.BUDGET_S > 0
    pairs = [("observe", "judge")] + ([("observe_on_engine", "judge_on_engine")] * all(engine))
    for observe_name, judge_name in pairs:
        observe, judge = getattr(module, observe_name), getattr(module, judge_name)
        assert inspect.iscoroutinefunction(observe), f"{module.__name__}.{observe_name}"
        assert list(inspect.signature(observe).parameters) == ["ctx"]
        assert not inspect.iscoroutinefunction(judge), f"{module.__name__}.{judge_name}"
        hints = get_type_hints(judge)
        assert list(inspect.signature(judge).parameters)[1:] == ["budget"]
        assert hints["budget"] is Budget and hints["return"] is CheckResult
        evidence = get_type_hints(observe)["return"]
        for kind in getattr(evidence, "__args__", (evidence,)):
            assert is_dataclass(kind), f"{module.__name__}.{observe_name} returns {kind}"
            assert kind.__dataclass_params__.frozen, f"{kind.__name__} is not frozen"  # type: ignore[attr-defined]
    if all(engine):
        assert isinstance(module.ENGINE_BUDGET_S, float) and module.ENGINE_BUDGET_S > 0
    else:
        assert module.MOCK_ONLY.startswith("needs ")


def test_a_module_without_the_shape_is_refused_naming_what_it_lacks() -> None:
    half = types.ModuleType("labkit.checks.half")
    half.ID, half.STEP, half.observe = "half", "01_baseline_streaming", None  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"it lacks SUMMARY, BUDGET_S, judge, MOCK_ONLY \(or "):
        Check.from_module(half)


def test_the_catalogue_holds_no_literal_seconds_or_summaries() -> None:
    source = inspect.getsource(catalogue)
    code = source[source.index('"""', 3) + 3 :]  # the docstring may name numbers
    assert not any(f"{n}.0" in code for n in range(1, 200)), "seconds belong in check modules"
    assert all(check.summary not in code for check in CHECKS + GATEWAY_CHECKS)


# What the catalogue was before it was built from the modules: the verdicts must not change.
BEFORE = [
    # id, step, budget_s, engine_budget_s, retry_inconclusive, proxy_env, replicas
    ("trickle", "02_forwarding_proxy", 10.0, 45.0, True, {}, 1),
    ("cancel", "04_cancel_on_disconnect", 8.0, 60.0, True, {}, 1),
    ("cancel_before_first_token", "04_cancel_on_disconnect", 6.0, 60.0, True, {}, 1),
    ("cancel_queued", "04_cancel_on_disconnect", 16.0, 60.0, True, {}, 1),
    ("cancel_whole_answer", "06_midstream_errors", 8.0, 60.0, True, {}, 1),
    ("usage", "05_usage_capture", 10.0, 90.0, True, {}, 1),
    ("midstream_error", "06_midstream_errors", 10.0, 0.0, True, {}, 1),
    ("upstream_status", "06_midstream_errors", 6.0, 0.0, True, {}, 1),
    ("content_encoding", "06_midstream_errors", 6.0, 0.0, True, {}, 1),
    ("long_stream", "07_heartbeats_and_timeouts", 16.0, 0.0, True, {}, 1),
    ("keepalive", "07_heartbeats_and_timeouts", 16.0, 0.0, True, {}, 1),
    ("keepalive_under_comments", "07_heartbeats_and_timeouts", 16.0, 0.0, True, {}, 1),
    ("integrity", "07_heartbeats_and_timeouts", 16.0, 0.0, True, {}, 1),
    ("concurrency", "02_forwarding_proxy", 32.0, 75.0, True, {}, 1),
    ("backpressure", "10_backpressure_and_slow_clients", 60.0, 0.0, False, {}, 1),
    ("passthrough", "07_heartbeats_and_timeouts", 10.0, 0.0, True, {}, 1),
    ("error_before_first_token", "06_midstream_errors", 25.0, 0.0, True, {}, 1),
    ("tool_calls", "09_tool_calls_and_partial_json", 10.0, 0.0, True, {}, 1),
    ("resume", "15_resumable_streams", 20.0, 0.0, True, {}, 1),
    ("resume_twice", "15_resumable_streams", 20.0, 0.0, True, {}, 1),
    ("resume_stop", "15_resumable_streams", 16.0, 0.0, True, {"RESUME_GRACE_S": "30"}, 1),
    ("resume_grace", "15_resumable_streams", 24.0, 0.0, True, {"RESUME_GRACE_S": "3"}, 1),
    ("replay_bound", "15_resumable_streams", 20.0, 0.0, True, {"REPLAY_EVENTS": "20"}, 1),
    ("minute_stream", "07_heartbeats_and_timeouts", 100.0, 0.0, True, {}, 1),
    ("resume_replica", "15_resumable_streams", 24.0, 0.0, True, {}, 2),
]


def test_ids_order_steps_and_budgets_are_as_they_were() -> None:
    now = [
        (
            c.id,
            c.step,
            c.budget_s,
            c.engine_budget_s,
            c.retry_inconclusive,
            dict(c.proxy_env),
            c.replicas,
        )
        for c in CHECKS + GATEWAY_CHECKS
    ]
    assert now == BEFORE
    assert ALL_IDS == (*CHECK_IDS, "minute_stream", "resume_replica")
    assert ENGINE_IDS == (
        "trickle",
        "cancel",
        "cancel_before_first_token",
        "cancel_queued",
        "cancel_whole_answer",
        "usage",
        "concurrency",
    )


def test_every_check_is_in_one_lane() -> None:
    laned = [i for lane in LANES for i in lane]
    assert sorted(laned) == sorted(ALL_IDS)
    assert len(set(laned)) == len(laned)


LITERAL_LIMIT = re.compile(r"\b(timeout|timeout_s|wait_s|limit_s|deadline_s)=\s*[1-9][\d.]*")


@pytest.mark.parametrize("module", MODULES, ids=[m.ID for m in MODULES])
def test_no_check_writes_a_timeout_as_a_number(module: types.ModuleType) -> None:
    """Bug: trickle's client gave up after an inline ``timeout=10`` that no budget stretched.
    Fix: every limit is a named constant at one CPU, stretched with the run's budget."""
    source = inspect.getsource(module)
    assert not LITERAL_LIMIT.findall(source), LITERAL_LIMIT.findall(source)
