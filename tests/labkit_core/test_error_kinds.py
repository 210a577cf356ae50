"""Errors are one hierarchy in one module, and each carries its kind as data: no verdict reads a
message.

Every exception class labkit defines lives in ``labkit/errors.py`` under ``LabkitError``, with a
``kind`` of its own and the ``exit_code`` the CLI uses (its family's). The kinds are one
vocabulary, ``ProblemKind``: a report's problem has the kind of the error that caused it. Why a
submission's proxy did not start travels as a kind from the child process to the grader's
report; the proof is a test that rewords every message and sees the same verdicts for real
failing submissions.

``mock_upstream`` is a separate package, not labkit: its own ``ApiError``, ``ScenarioError`` and
``ConnectionDropped`` stay there, and these tests walk ``labkit`` only.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

import labkit
import labkit.errors as errors
from labkit.checks.machine import Budget
from labkit.cli import main
from labkit.errors import (
    PROBLEM_KINDS,
    AppStartupError,
    ExitCode,
    InputError,
    InvalidTargetError,
    LabkitError,
    LoadFailure,
    MachineLacks,
    MemoryLimitExceeded,
    PortInUseError,
    RelayedError,
    RubricError,
    SandboxUnavailableError,
    ServerExitedError,
    ServerStartError,
    StartTimeoutError,
    TargetLoadError,
    UsageError,
    exit_code_of,
    run_command,
)
from labkit.grading import sandbox
from labkit.grading.cgroups import Cgroup
from labkit.grading.isolation import Limits
from labkit.grading.sandbox import problem_from, start_proxy
from labkit.servers._child import load_failure
from labkit.servers._status import ChildStatus

PACKAGE = Path(labkit.__file__).parent
#: Exception classes labkit defines that cannot live in labkit/errors.py, and why.
ALLOWED_ELSEWHERE = {
    "labkit.chat.hub.BrowserLeftError": (
        "it must subclass Tornado's HTTPInputError (so Tornado ends the proxied response "
        "quietly), and Tornado is imported only inside the function that patches "
        "jupyter-server-proxy, where the class is defined"
    ),
}


def _import_every_module() -> None:
    for module in pkgutil.walk_packages(labkit.__path__, "labkit."):
        importlib.import_module(module.name)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(sub) for sub in found))


def _labkit_exception_classes() -> set[type[BaseException]]:
    _import_every_module()
    return {
        cls
        for cls in _subclasses(BaseException)
        if cls.__module__ == "labkit" or cls.__module__.startswith("labkit.")
    }


def _error_classes() -> list[type[LabkitError]]:
    """labkit's own (a test's subclass made to try the CLI is not one of them)."""
    ours = (c for c in _subclasses(LabkitError) if c.__module__ == "labkit.errors")
    return [LabkitError, *sorted(ours, key=lambda c: c.__name__)]


def test_every_exception_class_labkit_defines_is_a_labkit_error_in_errors_py() -> None:
    misplaced = {
        f"{cls.__module__}.{cls.__name__}"  # a class made in a function: no <locals> part
        for cls in _labkit_exception_classes()
        if cls.__module__ != "labkit.errors" or not issubclass(cls, LabkitError)
    }
    assert misplaced - set(ALLOWED_ELSEWHERE) == set()


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("labkit.cli", "UsageError"),
        ("labkit.regions", "SolutionRegionError"),
        ("labkit.proxy_file", "ProxyFileError"),
        ("labkit.chat.browser", "BrowserUnavailableError"),
        ("labkit.servers", "NginxNotFoundError"),
        ("labkit.servers.nginx", "NginxNotFoundError"),
        ("labkit.servers", "RedisNotFoundError"),
        ("labkit.servers.redis", "RedisNotFoundError"),
        ("labkit.grading.roster", "GradingError"),
        ("labkit.grading.rubric", "RubricError"),
        ("labkit.grading.class_results", "MergeError"),
        ("labkit.grading.answers", "AnswersError"),
        ("labkit.grading.gradescope", "NotGradable"),
        ("labkit.grading.sandbox", "MemoryLimitExceeded"),
        ("labkit.grading.cgroups", "CgroupUnavailable"),
        ("labkit.grading.network", "NetworkSetupError"),
    ],
)
def test_an_error_still_imports_from_the_module_that_raises_it(module: str, name: str) -> None:
    """Notebooks, docs and tests import them from there (``from labkit.grading.roster import
    GradingError``): the same class as in labkit.errors."""
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_the_gateway_failure_is_the_error_class() -> None:
    from labkit.stream_gateway._relay import Failure

    assert Failure is errors.GatewayFailure


def _looks_like_an_exception(base: ast.expr) -> bool:
    name = ast.unparse(base).rsplit(".", 1)[-1]
    builtin = getattr(builtins, name, None)
    is_builtin_exception = isinstance(builtin, type) and issubclass(builtin, BaseException)
    return is_builtin_exception or name.endswith(("Error", "Exception", "Exceeded"))


def _classes_defined_in_functions() -> Iterator[str]:
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.ClassDef) and any(
                        _looks_like_an_exception(b) for b in node.bases
                    ):
                        yield f"{module}.{node.name}"


def test_no_exception_class_hides_inside_a_function() -> None:
    """A class made when a function runs is invisible to the import walk above: each one is
    read from the source instead and must be one of the explicit exceptions."""
    assert set(_classes_defined_in_functions()) <= set(ALLOWED_ELSEWHERE)


def test_every_error_class_has_a_snake_case_kind_of_its_own() -> None:
    classes = _error_classes()
    for cls in classes:
        assert "kind" in vars(cls), f"{cls.__name__} inherits its kind; give it its own"
        assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", cls.kind), cls.kind
    kinds = [cls.kind for cls in classes]
    assert len(kinds) == len(set(kinds)), sorted(k for k in kinds if kinds.count(k) > 1)


def test_every_error_class_kind_is_a_problem_kind() -> None:
    """One vocabulary: mypy holds each class's ``kind`` to ``ProblemKind``; this holds every
    class, walked at run time (mypy does not check the tests' own)."""
    assert {cls.kind for cls in _error_classes()} <= PROBLEM_KINDS


def _problem_kinds_written_in_the_source() -> Iterator[tuple[str, str]]:
    """Every ``Problem(...)`` of labkit's source and its kind: a string written there, or
    ``X.kind`` of an error class (``exc.kind``, ``exc.reason``: read at run time, below)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Problem" and node.args:
                kind = node.args[0]
                where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                if isinstance(kind, ast.Constant):
                    yield where, str(kind.value)
                elif isinstance(kind, ast.Attribute) and kind.attr == "kind":
                    owner = ast.unparse(kind.value)
                    if owner[:1].isupper():  # a class: MemoryLimitExceeded.kind
                        yield where, getattr(errors, owner).kind
                    else:
                        assert owner == "exc", where
                else:
                    assert ast.unparse(kind) == "exc.reason", where  # a LoadFailure


def test_every_problem_kind_the_grader_writes_is_a_problem_kind() -> None:
    written = list(_problem_kinds_written_in_the_source())
    kinds = {kind for _, kind in written}
    assert kinds <= PROBLEM_KINDS, written
    # the walk found the grader's own (those of the errors: test_the_problem_an_error_caused...)
    assert {"no_file", "no_answer", "submission_timeout", "grader_crashed", "memory_limit"} <= kinds
    assert set(get_args(LoadFailure)) <= PROBLEM_KINDS


PROBLEMS_FROM_ERRORS: list[BaseException] = [
    MemoryLimitExceeded(name="proxy", limit_bytes=384 * 1024 * 1024),
    AppStartupError(name="proxy", error="RuntimeError: no database"),
    StartTimeoutError(name="proxy", timeout=8.0),
    ServerExitedError(name="proxy", how="the server process exited with code 3"),
    PortInUseError(name="proxy", host="127.0.0.1", port=8901),
    ServerStartError("'proxy' could not bind", name="proxy"),
    InvalidTargetError("proxy", "there is no file proxy.py"),
]


@pytest.mark.parametrize("exc", PROBLEMS_FROM_ERRORS, ids=lambda e: type(e).__name__)
def test_the_problem_an_error_caused_has_that_errors_kind(exc: LabkitError) -> None:
    """Bug: the report named a failure with a second vocabulary (``startup_failed`` for
    ``app_startup_failed``, ``exited`` for ``server_exited``, ``memory_limit`` for
    ``memory_limit_exceeded``), two lists of names that drift apart. Fix: one ``ProblemKind``,
    and a problem's kind is its error's; the report's (public) names were kept."""
    assert problem_from(exc, "proxy.py").kind == type(exc).kind


def test_each_way_a_child_fails_to_start_is_the_kind_of_the_error_it_becomes() -> None:
    """The child's status names the failure with the kind the parent's error has (a load
    failure: the ``TargetLoadError``'s reason), so child, error and report share one word."""
    from types import SimpleNamespace

    from labkit.servers._status import KINDS
    from labkit.servers._subprocess import _START_ERRORS

    server = SimpleNamespace(name="proxy", host="127.0.0.1", port=8901, target="/x/proxy.py")
    assert set(_START_ERRORS) == KINDS - {"ready"}
    for kind, make in _START_ERRORS.items():
        error = make(server, ChildStatus(kind, error="E: x"))  # type: ignore[arg-type]
        assert getattr(error, "reason", error.kind) == kind, (kind, error)
        assert kind in PROBLEM_KINDS


def test_the_reports_public_kinds_are_the_error_classes_kinds() -> None:
    """The names instructors read in the JSON report and grades.csv (docs/instructors.md)."""
    assert AppStartupError.kind == "startup_failed"
    assert ServerExitedError.kind == "exited"
    assert MemoryLimitExceeded.kind == "memory_limit"
    assert StartTimeoutError.kind == "start_timeout"
    assert ServerStartError.kind == "start_failed"
    assert problem_from(RuntimeError("odd"), "proxy.py").kind == "start_failed"


def test_each_family_has_its_exit_code() -> None:
    """2: the input is wrong; 3: this machine lacks something; 4: anything else labkit could
    not do. 0 and 1 are what a command that ran found (every check passed, or not)."""
    for cls in _error_classes():
        if issubclass(cls, InputError):
            assert cls.exit_code == ExitCode.INPUT == 2, cls
        elif issubclass(cls, MachineLacks):
            assert cls.exit_code == ExitCode.MACHINE == 3, cls
        else:
            assert cls.exit_code == ExitCode.FAILED == 4, cls
    assert UsageError.exit_code == 2
    assert (ExitCode.PASSED, ExitCode.CHECK_FAILED, ExitCode.INTERRUPTED) == (0, 1, 130)


def test_the_help_says_what_each_exit_code_means(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == ExitCode.PASSED
    shown = capsys.readouterr().out
    assert "exit codes:" in shown
    for code in ExitCode:
        assert re.search(rf"^  {code.value}  \S", shown, re.M), code


def test_a_relayed_error_exits_as_the_error_it_relays() -> None:
    """A grading worker's setup error, raised again in the CLI's process, keeps its exit code:
    a sandbox the worker could not use is still "this machine lacks it"."""
    assert RelayedError("no bwrap", cause=SandboxUnavailableError.kind).exit_code == 3
    assert RelayedError("bad rubric", cause=RubricError.kind).exit_code == 2
    assert RelayedError("odd", cause="no_answer").exit_code == exit_code_of("no_answer") == 4
    assert RelayedError.exit_code == 4


def test_every_entry_point_has_the_one_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each ``main`` runs through ``run_command``: an error is one line and its exit code, and
    a note the command line added (which option) follows the library's message."""
    import labkit.grading.classroom
    import labkit.grading.environment
    import labkit.grading.gradescope
    import labkit.grading.worker

    for module in (
        labkit.cli,
        labkit.grading.classroom,
        labkit.grading.environment,
        labkit.grading.gradescope,
        labkit.grading.worker,
    ):
        assert "run_command(" in inspect.getsource(module.main), module.__name__

    def body() -> int:
        error = RubricError("r.toml", "weights.x is 'a', expected a number")
        error.add_note("Or leave --rubric out to use the default rubric.")
        raise error

    assert run_command(body) == 2
    assert capsys.readouterr().err == (
        "error: Rubric r.toml: weights.x is 'a', expected a number. Fix the file. Or leave "
        "--rubric out to use the default rubric.\n"
    )

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_command(interrupted) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_cli_exits_with_the_code_the_error_carries(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Odd(LabkitError):
        kind = "odd_error_of_this_test"
        exit_code = 7

    def run(_args: argparse.Namespace) -> int:
        raise Odd("something odd; do the other thing")

    parser = argparse.ArgumentParser(prog="labkit")
    parser.set_defaults(run=run)
    monkeypatch.setattr("labkit.cli.build_parser", lambda: parser)
    assert main([]) == 7
    assert capsys.readouterr().err == "error: something odd; do the other thing\n"


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (SyntaxError("invalid syntax"), "syntax_error"),
        (IndentationError("expected an indented block"), "syntax_error"),
        (TabError("inconsistent use of tabs"), "syntax_error"),
        (ImportError("cannot import name 'x'"), "import_error"),
        (ModuleNotFoundError("No module named 'flask'"), "import_error"),
        (RuntimeError("no database"), "load_error"),
        (AttributeError("module 'os' has no attribute 'nope'"), "load_error"),
        (SystemExit(1), "load_error"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v,
)
def test_the_child_names_a_load_failure_by_the_class_of_what_was_raised(
    raised: BaseException, reason: str
) -> None:
    """An AttributeError raised by the module is its own error, not a missing ``app``: the
    child says ``no_app`` only where it looked for ``app`` and found none."""
    assert load_failure(raised) == reason


@pytest.mark.parametrize("reason", get_args(LoadFailure))
def test_a_load_failure_becomes_the_problem_of_the_same_kind(reason: LoadFailure) -> None:
    exc = TargetLoadError(name="proxy", target="proxy.py", error="E: x", reason=reason)
    problem = problem_from(exc, "proxy.py")
    assert problem.kind == reason
    assert problem.message.startswith("proxy.py ")


# Real submissions that fail to start in each way the grader reports, and the verdict it gives.
STARTUP_RAISES = (
    "from contextlib import asynccontextmanager\n"
    "from fastapi import FastAPI\n\n\n"
    "@asynccontextmanager\n"
    "async def lifespan(app):\n"
    "    raise RuntimeError('no database')\n"
    "    yield\n\n\n"
    "app = FastAPI(lifespan=lifespan)\n"
)
FAILING_SUBMISSIONS = {
    "syntax_error": "def broken(:\n    pass\n",
    "import_error": "import not_a_module_anyone_has\n",
    "no_app": "application = None\n",
    "load_error": "raise RuntimeError('no database')\n",
    "startup_failed": STARTUP_RAISES,
    "start_timeout": "while True:\n    pass\n",
    "exited": "import os\nos._exit(3)\n",
    "memory_limit": "_held = bytearray(600 * 1024 * 1024)\n",
}
REWORDED = "(reworded: nothing of the original wording is left)"


def _reword(text: str) -> str:
    return REWORDED if text else text


@pytest.fixture
def every_message_reworded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text the child reports (its error, the class name it raised, the traceback) and
    every error's message say something else; kinds and numbers stay."""
    read = ChildStatus.read.__func__  # type: ignore[attr-defined]

    def read_reworded(cls: type[ChildStatus], path: Path) -> ChildStatus | None:
        status: ChildStatus | None = read(cls, path)
        if status is None or status.kind == "ready":
            return status
        return dataclasses.replace(
            status,
            error=_reword(status.error),
            exception=_reword(status.exception),
            details=_reword(status.details),
        )

    monkeypatch.setattr(ChildStatus, "read", classmethod(read_reworded))
    for cls in _error_classes():
        if cls.__module__ == "labkit.errors":
            monkeypatch.setattr(cls, "__str__", lambda self: REWORDED)


def _reword_the_error(exc: BaseException) -> None:
    """What the parent wrote into the error (its ``error``, ``how``, stderr...), reworded too:
    only its typed ``reason`` is data."""
    exc.args = (REWORDED,)
    for name, value in list(vars(exc).items()):
        if isinstance(value, str) and name != "reason":
            setattr(exc, name, _reword(value))


def _memory_limit_unavailable() -> str:
    if os.geteuid() != 0:
        return "a memory limit needs a cgroup, which needs root"
    cgroup = Cgroup.create(Limits())
    if cgroup is None:
        return "no cgroup with a memory limit can be made here"
    cgroup.remove()
    return ""


@pytest.mark.sockets  # starts the proxy's process
@pytest.mark.usefixtures("every_message_reworded")
@pytest.mark.parametrize("verdict", list(FAILING_SUBMISSIONS))
def test_rewording_every_message_changes_no_start_failure_verdict(
    verdict: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: a submission without ``app`` was told apart from one that raised while it was
    imported by the words "module-level" in the child's message, so rewording it turned the
    verdict ``no_app`` into ``load_error``. Fix: the child reports which failure it was."""
    if verdict == "memory_limit" and (why := _memory_limit_unavailable()):
        pytest.skip(why)
    if verdict == "start_timeout":  # the verdict is the same at any limit; wait less for it
        monkeypatch.setattr(sandbox, "PROXY_START_TIMEOUT_S", 3.0)
    submission = tmp_path / "proxy.py"
    submission.write_text(FAILING_SUBMISSIONS[verdict], encoding="utf-8")
    with pytest.raises(LabkitError) as info:
        start_proxy(
            submission,
            upstream_url="http://127.0.0.1:9",
            usage_log=tmp_path / "usage.jsonl",
            cwd=tmp_path,
            budget=Budget(cpus=1.0),
        ).stop()  # not reached: each of these fails to start
    exc = info.value
    _reword_the_error(exc)
    assert str(exc) == REWORDED
    assert problem_from(exc, "proxy.py").kind == verdict


#: Library messages that still name an option of ``labkit``'s command line, and why.
NAMES_AN_OPTION: dict[str, str] = {}


def _options_of_the_command_line() -> set[str]:
    options: set[str] = set()
    parsers = [labkit.cli.build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            options.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return options - {"--help"}


def _error_messages() -> Iterator[tuple[str, str]]:
    """Each string written into an exception raised or built outside the CLI, with its file."""
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        if where == "labkit/cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _looks_like_an_exception(node.func):
                for part in ast.walk(node):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        yield where, part.value


def test_library_errors_say_what_is_wrong_and_the_cli_which_option() -> None:
    """Bug: library errors named the CLI's options ("Fix the file, or leave --rubric out",
    "e.g. --out x-2"), wrong for a notebook or a script that called the function. Fix: the
    library says what is wrong; the CLI adds which option (``add_note``, or its own check)."""
    options = _options_of_the_command_line()
    assert {"--rubric", "--out", "--shard", "--notebooks", "--solution"} <= options
    naming = {
        where
        for where, text in _error_messages()
        for option in options
        if re.search(rf"(^|[\s`(]){re.escape(option)}\b", text)
    }
    assert naming <= set(NAMES_AN_OPTION), naming


def test_the_cli_says_which_option_gave_a_rubric_that_cannot_be_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rubric = tmp_path / "rubric.toml"
    rubric.write_text("max_score = -1\n")
    assert main(["grade", "proxy.py", "--rubric", str(rubric)]) == 2
    assert capsys.readouterr().err == (
        f"error: Rubric {rubric}: max_score = -1 is not valid; expected a number >= 0. Fix the "
        "file. Or leave --rubric out to use the default rubric.\n"
    )


def test_no_error_is_the_bare_root() -> None:
    """Bug: ten places raised ``LabkitError`` itself, so a caller could not tell a bundle that
    cannot be made from a chat page that timed out, and each exited as the root does. Fix: each
    raises a class of its own (``BundleError``, ``ChatPageError``, ``ChatWaitTimeout``)."""
    bare = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "LabkitError"
    ]
    assert bare == []


def test_errors_py_imports_nothing_from_labkit() -> None:
    """The bottom of the layers: every other module may import its errors from it."""
    tree = ast.parse(inspect.getsource(errors))
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not any(name.startswith("labkit") for name in imported)


@pytest.mark.sockets  # starts the grading worker
def test_a_sandbox_that_cannot_run_is_a_setup_error_not_a_crashed_grader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug: with LABKIT_SANDBOX=bubblewrap and a bwrap that cannot run, the worker died of a
    bare RuntimeError, and the submission was reported ``grader_crashed``. Fix: the error is a
    LabkitError, which the CLI prints, with exit code 3: this machine lacks the sandbox."""
    refusing = tmp_path / "bin"
    refusing.mkdir()
    bwrap = refusing / "bwrap"
    bwrap.write_text("#!/bin/sh\necho 'bwrap: no user namespaces here' >&2\nexit 1\n")
    bwrap.chmod(0o755)
    monkeypatch.setenv("PATH", f"{refusing}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LABKIT_SANDBOX", "bubblewrap")
    submission = tmp_path / "proxy.py"
    submission.write_text("from fastapi import FastAPI\n\napp = FastAPI()\n", encoding="utf-8")

    assert main(["grade", str(submission), "--only", "trickle"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: LABKIT_SANDBOX=bubblewrap, but bwrap is refused here (bwrap: no user namespaces "
        "here; in a container?). Make bubblewrap work here, or unset LABKIT_SANDBOX to grade in "
        "the strongest sandbox this machine allows (each report names it).\n"
    )
