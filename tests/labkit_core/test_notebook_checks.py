"""A notebook's check harness: the verdict lines it prints, and the parts it names as missing.

The stubs are made by ``labkit.regions.strip_solutions``, the same code that makes the learner
copies, and loaded from a real file, so that a part's source reads as it does in a kernel.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from labkit import NotebookChecks
from labkit.notebook_checks import Missing, missing_parts
from labkit.regions import strip_solutions

SOLVED = '''
def to_openai(event):
    """One event, translated."""
    ### BEGIN SOLUTION
    return [event]
    ### END SOLUTION


class Scanner:
    def __init__(self):
        self.fields = {}

    def feed(self, fragment):
        for ch in fragment:
            ### BEGIN SOLUTION
            self.fields[ch] = True
            ### END SOLUTION


def given(event):
    return event
'''


def load(tmp_path: Path, name: str, source: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def learner(tmp_path: Path) -> ModuleType:
    """The parts as a learner gets them: both solution regions stubbed, for notebook 08_x."""
    stubbed, count = strip_solutions(SOLVED, kind="code", notebook="08_x")
    assert count == 2
    return load(tmp_path, "learner_parts", stubbed)


@pytest.fixture
def written(tmp_path: Path) -> ModuleType:
    return load(tmp_path, "written_parts", SOLVED)


@pytest.fixture
def shown() -> list[str]:
    return []


@pytest.fixture
def checks(shown: list[str]) -> NotebookChecks:
    return NotebookChecks(say=shown.append)


def test_a_passing_judge_prints_one_pass_line(checks: NotebookChecks, shown: list[str]) -> None:
    checks.check("adapter", "text survives", lambda: (True, "4 chunks"))
    assert shown == ["PASS adapter: text survives"]


def test_a_failing_judge_prints_what_it_saw(checks: NotebookChecks, shown: list[str]) -> None:
    checks.check("adapter", "text survives", lambda: (False, "text equal: False"))
    assert shown == ["FAIL adapter: text survives", "    saw: text equal: False"]


def test_a_judge_that_raises_fails_with_the_exception(
    checks: NotebookChecks, shown: list[str]
) -> None:
    def judge() -> tuple[bool, str]:
        raise KeyError("model")

    checks.check("billing", "every bill adds up", judge)
    assert shown == ["FAIL billing: every bill adds up", "    saw: KeyError: 'model'"]


def test_a_value_is_judged_and_an_exception_value_fails_the_check(
    checks: NotebookChecks, shown: list[str]
) -> None:
    checks.check("states", "one ending each", lambda ends: (ends == ["done"], str(ends)), ["done"])
    checks.check("states", "one ending each", lambda ends: (True, ""), TimeoutError("no answer"))
    assert shown == [
        "PASS states: one ending each",
        "FAIL states: one ending each",
        "    saw: TimeoutError: no answer",
    ]


def test_an_unwritten_part_is_named_and_its_judge_never_runs(
    checks: NotebookChecks, shown: list[str], learner: ModuleType
) -> None:
    ran = []
    checks.check(
        "adapter",
        "text survives",
        lambda: (ran.append(1), (True, ""))[1],
        needs=[learner.to_openai],
    )
    assert shown == ["FAIL adapter: not written yet: to_openai (notebook 08_x)"]
    assert ran == []


def test_a_written_part_lets_the_judge_run(
    checks: NotebookChecks, shown: list[str], written: ModuleType
) -> None:
    checks.check("adapter", "text survives", lambda: (True, ""), needs=[written.to_openai])
    assert shown == ["PASS adapter: text survives"]


def test_a_method_of_a_class_is_named_with_its_class(learner: ModuleType) -> None:
    assert missing_parts(learner.Scanner) == [Missing("Scanner.feed", "08_x")]
    assert missing_parts(learner.Scanner.feed) == [Missing("Scanner.feed", "08_x")]
    assert missing_parts(learner.given, learner.Scanner.__init__) == []


def test_missing_parts_are_grouped_by_notebook(
    checks: NotebookChecks, shown: list[str], learner: ModuleType
) -> None:
    proxy_failed = RuntimeError(
        "'proxy' did not start: its startup code raised NotImplementedError: Write this part "
        "yourself: make_client, in notebook 02_forwarding_proxy. Fix the app's startup."
    )
    checks.check(
        "gateway",
        "released by sentence",
        lambda: (True, ""),
        needs=[proxy_failed, learner.to_openai, learner.Scanner],
    )
    assert shown == [
        "FAIL gateway: not written yet: make_client (notebook 02_forwarding_proxy); "
        "to_openai, Scanner.feed (notebook 08_x)"
    ]


def test_a_stub_message_in_a_servers_logs_names_the_part(
    checks: NotebookChecks, shown: list[str]
) -> None:
    class Served:
        logs: ClassVar[list[str]] = [
            "INFO started",
            "NotImplementedError: Write this part yourself: log_usage, "
            "in notebook 05_usage_capture.",
        ]

    checks.check(
        "metrics", "seven first tokens", lambda: (False, "0 first tokens"), servers=[Served()]
    )
    assert shown == ["FAIL metrics: not written yet: log_usage (notebook 05_usage_capture)"]


def test_a_stub_message_in_what_the_judge_raised_names_the_part(
    checks: NotebookChecks, shown: list[str], learner: ModuleType
) -> None:
    checks.check("adapter", "text survives", lambda: (True, learner.to_openai("ping")))
    assert shown == ["FAIL adapter: not written yet: to_openai (notebook 08_x)"]


def test_a_proxy_file_with_a_stub_is_missing_its_part(tmp_path: Path) -> None:
    proxy = tmp_path / "proxy.py"
    source = "def make_client(url):\n    ### BEGIN SOLUTION\n    return url\n    ### END SOLUTION\n"
    proxy.write_text(strip_solutions(source, kind="code", notebook="02_forwarding_proxy")[0])
    assert missing_parts(proxy) == [Missing("make_client", "02_forwarding_proxy")]
    proxy.write_text(source)
    assert missing_parts(proxy, tmp_path / "absent.py") == []


def test_a_function_running_its_stand_in_is_missing_but_a_file_of_stand_ins_is_not(
    tmp_path: Path, learner: ModuleType
) -> None:
    """A ``%%proxy_part`` function stubbed with a stand-in runs, but is not written: a check of
    it says so instead of judging the stand-in. ``proxy.py`` itself runs later notebooks'
    stand-ins while the learner is on earlier ones, so a path with stand-ins is not missing."""
    source = (
        "def pass_on(event):\n    ### BEGIN SOLUTION\n    ### STAND-IN: return event\n"
        "    return event.upper()\n    ### END SOLUTION\n"
    )
    stubbed, _ = strip_solutions(source, kind="code", notebook="05_usage_capture", importable=True)
    module = load(tmp_path, "stand_in_parts", stubbed)
    assert module.pass_on("a") == "a"
    assert missing_parts(module.pass_on) == [Missing("pass_on", "05_usage_capture")]
    assert missing_parts(tmp_path / "stand_in_parts.py") == []
    assert missing_parts(learner.to_openai) == [Missing("to_openai", "08_x")]  # once, not twice


def test_needs_is_silent_when_all_is_written(
    checks: NotebookChecks, shown: list[str], written: ModuleType
) -> None:
    assert checks.needs(written.to_openai, written.Scanner, "a value", 3) is True
    assert shown == []


def test_needs_says_in_one_line_what_to_write_first(
    checks: NotebookChecks, shown: list[str], learner: ModuleType, written: ModuleType
) -> None:
    assert checks.needs(written.given, learner.to_openai) is False
    assert checks.needs(learner.to_openai, learner.Scanner) is False
    assert shown == [
        "skipped: needs to_openai (notebook 08_x), not written yet",
        "skipped: needs to_openai (notebook 08_x) and 1 more part, not written yet",
    ]


def test_needs_names_an_earlier_step_that_failed(checks: NotebookChecks, shown: list[str]) -> None:
    assert checks.needs(ConnectionError("refused")) is False
    assert shown == ["skipped: a step before this one failed: ConnectionError: refused"]


def test_attempt_returns_the_value_or_the_exception() -> None:
    checks = NotebookChecks(say=lambda line: None)
    assert checks.attempt(lambda: 42) == 42
    raised = checks.attempt(lambda: 1 / 0)
    assert isinstance(raised, ZeroDivisionError)


def test_attempt_does_not_run_when_what_it_needs_failed() -> None:
    checks = NotebookChecks(say=lambda line: None)
    ran: list[Any] = []
    earlier = OSError("no proxy")
    assert checks.attempt(lambda: ran.append(1), "fine", earlier, ValueError("later")) is earlier
    assert ran == []


def test_only_the_check_cell_output_is_printed_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert NotebookChecks().check("x", "y", lambda: (True, "")) is None  # a cell shows no Out[]
    assert capsys.readouterr().out == "PASS x: y\n"
