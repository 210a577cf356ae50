"""Every error labkit raises, defined and drawn in one place, and the one vocabulary of kinds.

The hierarchy (each family's exit code in brackets; see ``ExitCode``)::

    LabkitError                      root: catch this to catch anything labkit raises [4]
    ├── InputError                   the input is wrong: what was given cannot be used [2]
    │   ├── UsageError               a command line that cannot be done
    │   ├── SettingError             a LABKIT_* environment variable with a value that cannot be
    │   │                            used (labkit.settings)
    │   ├── InvalidTargetError       a serve_subprocess target that is neither a file nor mod:attr
    │   ├── ProxyFileError           proxy.py is missing, not Python, or a part does not fit
    │   ├── SolutionRegionError      solution-region delimiters that do not pair up
    │   ├── ChatPageError            a state machine that cannot go into the chat page
    │   ├── RubricError              a rubric file that cannot be used
    │   ├── GradingError             submissions, or a file grading reads, that cannot be used
    │   ├── NotGradable              an upload that holds nothing to grade
    │   ├── MergeError               shard folders that do not add up to one class
    │   ├── AnswersError             written answers that cannot be collected, marks that cannot
    │   │                            be folded in
    │   ├── BundleError              notebooks, a solution or a rubric that cannot make the
    │   │                            learner bundle
    │   └── EngineReadError          the engine named (--engine, LABKIT_ENGINE_URL) answered its
    │                                /metrics or /v1/models unexpectedly, or not at all
    ├── MachineLacks                 this machine lacks something the command needs [3]
    │   ├── NginxNotFoundError       no nginx executable on this machine
    │   ├── RedisNotFoundError       no redis-server executable on this machine
    │   ├── EngineNotBuiltError      the real engine is not in the cache yet
    │   ├── BrowserUnavailableError  no headless Chromium can run here
    │   ├── SandboxUnavailableError  the sandbox LABKIT_SANDBOX names cannot run here
    │   ├── CgroupUnavailable        no cgroup with the wanted limits can be made here
    │   ├── NetworkSetupError        a grading's own network namespace is not usable
    │   └── GraderEnvironmentError   the grading user cannot start the grader's Python or
    │                                import what a proxy needs: nothing is graded
    ├── ServerStartError             a server did not come up; nothing is left running
    │   ├── PortInUseError           the requested port is already taken
    │   ├── StartTimeoutError        still not serving when the start deadline passed
    │   ├── AppStartupError          the app's own startup (lifespan) raised
    │   ├── ServerExitedError        the server thread or child process ended early
    │   ├── TargetLoadError          a subprocess target could not be loaded; its ``reason``
    │   │                            (a LoadFailure) says how
    │   └── MemoryLimitExceeded      the kernel stopped a proxy for memory while it started
    ├── AlreadyStartedError          start() called on a server that was started before
    ├── CaptureError                 capture_stream could not get a response at all
    ├── MockUpstreamError            the mock's debug endpoints answered unexpectedly
    ├── EngineBuildError             the real engine could not be downloaded or built
    ├── GatewayFailure               one upstream attempt of the stream gateway gave no usable
    │                                answer (its ``reason`` says why; the gateway catches it)
    ├── ChatWaitTimeout              the chat page did not reach a state in time
    └── RelayedError                 an error a grading worker stopped on, raised again in the
                                     process that started it (its ``cause`` is that error's kind)

Each class carries, as click's exceptions do, what a program needs to act on it without
reading its text: ``kind``, a stable snake_case id of its own, and ``exit_code``, what an entry
point exits with when it stops on it (its family's). A failure with finer kinds carries them as
data too (``TargetLoadError.reason``, ``GatewayFailure.reason``), so no verdict depends on the
wording of a message.

**One vocabulary.** ``ProblemKind`` is every kind labkit names: each class's ``kind`` and each
``kind`` of a grading report's problem (``labkit.grading.report.Problem``, shown in the JSON
report and grades.csv). A problem that an error caused has that error's kind (a proxy that
exited before it served: ``ServerExitedError``, ``exited``); the kinds with no class of their
own are a learner's file that could not be loaded (a ``LoadFailure``) and the few a grader sees
without an error (``no_file``, ``no_answer``, ``submission_timeout``, ``grader_crashed``). mypy
holds every kind to the ``Literal``; ``tests/labkit_core/test_error_kinds.py`` holds the classes.

**Exit codes that mean something** (``ExitCode``): 0 done, every check passed; 1 the learner's
work fell short (a check failed, or a submission could not be graded: its report says why); 2
the input is wrong (an ``InputError``, or a command line argparse refused), nothing was done; 3
this machine lacks something (a ``MachineLacks``): fix the machine, not the input; 4 labkit
could not finish for another reason (any other ``LabkitError``); 130 interrupted (Ctrl-C).

Each message says what was expected, what happened instead and what to do. The constructors
here that take the facts build the message, so that wording lives here and a test pins it
(``tests/labkit_core/test_labkit_errors.py``, which also keeps this drawing complete); the
classes that take a whole message get it from the module that raises them, whose tests pin it.
A library message says what is wrong in the library's terms (a path, a parameter); the command
line adds which of its options to change (``add_note`` on the error, shown after its message).
The modules that raise a class also export it (``from labkit.grading.roster import
GradingError`` works).

Library code raises; every entry point (``labkit``, and the ``python -m labkit.grading.*``
commands) runs its body through ``run_command``, the one handler that shows a ``LabkitError``
as one line, ``error: <message> <notes>`` on stderr, and exits with its ``exit_code``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import ClassVar, Final, Literal, get_args

__all__ = [
    "NGINX_INSTALL_HINT",
    "PROBLEM_KINDS",
    "REDIS_INSTALL_HINT",
    "AlreadyStartedError",
    "AnswersError",
    "AppStartupError",
    "BrowserUnavailableError",
    "BundleError",
    "CaptureError",
    "CgroupUnavailable",
    "ChatPageError",
    "ChatWaitTimeout",
    "EngineBuildError",
    "EngineNotBuiltError",
    "EngineReadError",
    "ExitCode",
    "GatewayFailure",
    "GraderEnvironmentError",
    "GradingError",
    "InputError",
    "InvalidTargetError",
    "LabkitError",
    "LoadFailure",
    "MachineLacks",
    "MemoryLimitExceeded",
    "MergeError",
    "MockUpstreamError",
    "NetworkSetupError",
    "NginxNotFoundError",
    "NotGradable",
    "PortInUseError",
    "ProblemKind",
    "ProxyFileError",
    "RedisNotFoundError",
    "RelayedError",
    "RubricError",
    "SandboxUnavailableError",
    "ServerExitedError",
    "ServerStartError",
    "SettingError",
    "SolutionRegionError",
    "StartTimeoutError",
    "TargetLoadError",
    "UsageError",
    "exit_code_of",
    "run_command",
]

#: How loading a subprocess target failed, as the child saw it (by the class of what loading
#: raised, or by where it stopped): a typo, a missing import, no ``app`` in the module, or
#: anything else the module raised while it was imported. The grader reports it as the kind of
#: the submission's problem.
LoadFailure = Literal["syntax_error", "import_error", "no_app", "load_error"]

#: Every kind labkit names, one vocabulary (see the module docstring): a grading report's
#: ``problem.kind`` and each error class's ``kind``. The first group is what a report can show
#: (public: instructors read it in the JSON report and grades.csv; keep those stable).
ProblemKind = Literal[
    # why a submission could not be graded (fully), as a report says it
    LoadFailure,
    "no_file",  # no file at the path given
    "start_failed",  # ServerStartError: the proxy did not start, no finer kind known
    "port_in_use",  # PortInUseError
    "start_timeout",  # StartTimeoutError: an endless loop or a long wait at import or startup
    "startup_failed",  # AppStartupError: the app's lifespan or startup handler raised
    "exited",  # ServerExitedError: the proxy's process ended before it served
    "memory_limit",  # MemoryLimitExceeded, or stopped for memory while it was checked
    "invalid_target",  # InvalidTargetError
    "no_answer",  # it started, and did not answer one short stream
    "submission_timeout",  # grading it took longer than the rubric allows
    "grader_crashed",  # the grading worker ended without a report
    # the other errors: what stops a command or a notebook cell
    "labkit_error",
    "input_invalid",
    "usage",
    "setting_invalid",
    "proxy_file_unusable",
    "solution_regions_unpaired",
    "chat_page_invalid",
    "rubric_unusable",
    "grading_input_unusable",
    "not_gradable",
    "shards_do_not_merge",
    "answers_unusable",
    "bundle_unmakeable",
    "machine_lacks",
    "nginx_not_found",
    "redis_not_found",
    "engine_not_built",
    "browser_unavailable",
    "sandbox_unavailable",
    "cgroup_unavailable",
    "network_setup_failed",
    "grader_environment_broken",
    "target_load_failed",
    "already_started",
    "capture_failed",
    "mock_upstream_unexpected",
    "engine_build_failed",
    "engine_read_failed",
    "gateway_attempt_failed",
    "chat_wait_timeout",
    "relayed",
]


#: ``ProblemKind``'s members (``LoadFailure``'s among them: a ``Literal`` inside a ``Literal`` is
#: flattened), for code that reads a kind it did not write (a worker's outcome).
PROBLEM_KINDS: Final[frozenset[str]] = frozenset(get_args(ProblemKind))


class ExitCode(IntEnum):
    """What a labkit entry point exits with. Each error class carries its own (``exit_code``,
    its family's); a command that ran to its end exits 0 or 1 by what it found."""

    PASSED = 0  # done, and every check passed
    CHECK_FAILED = 1  # the learner's work fell short: a check failed, or it could not be graded
    INPUT = 2  # the input is wrong (InputError, or a command line argparse refused)
    MACHINE = 3  # this machine lacks something the command needs (MachineLacks)
    FAILED = 4  # labkit could not finish for another reason (any other LabkitError)
    INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it


NGINX_INSTALL_HINT: Final = (
    "Install it with `apt-get install nginx` (Debian/Ubuntu, as root) or "
    "`conda install -c conda-forge nginx` (conda users; environment.yml lists it), "
    "then restart the kernel."
)

REDIS_INSTALL_HINT: Final = (
    "`make test` installs it when run as root on Debian/Ubuntu; otherwise install it with "
    "`apt-get install redis-server` (Debian/Ubuntu, as root), `brew install redis` (macOS) or "
    "`conda install -c conda-forge redis-server` (conda users; environment.yml lists it)."
)


class LabkitError(Exception):
    """Root of every error labkit raises."""

    kind: ClassVar[ProblemKind] = "labkit_error"
    #: what an entry point exits with when it stops on this error (a class's, but for the
    #: ``RelayedError`` that carries another's)
    exit_code: int = ExitCode.FAILED


class InputError(LabkitError):
    """The input is wrong: a command line, a file, a setting or an argument that cannot be used.
    The message says which and what to give instead; nothing was done."""

    kind: ClassVar[ProblemKind] = "input_invalid"
    exit_code: int = ExitCode.INPUT


class MachineLacks(LabkitError):
    """This machine lacks something the command needs (a program, a sandbox, a browser, a
    built engine): the message says what and how to get it. Nothing is wrong with the input."""

    kind: ClassVar[ProblemKind] = "machine_lacks"
    exit_code: int = ExitCode.MACHINE


class ServerStartError(LabkitError):
    """A server did not start. Whatever was started has been stopped again."""

    kind: ClassVar[ProblemKind] = "start_failed"

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class PortInUseError(ServerStartError):
    kind: ClassVar[ProblemKind] = "port_in_use"

    def __init__(self, *, name: str, host: str, port: int) -> None:
        super().__init__(
            f"{name!r} could not start on {host}:{port}: the port is already in use. "
            "Pass port=0 to pick a free port, or stop the server that holds it.",
            name=name,
        )
        self.host = host
        self.port = port


class StartTimeoutError(ServerStartError):
    kind: ClassVar[ProblemKind] = "start_timeout"

    def __init__(self, *, name: str, timeout: float) -> None:
        super().__init__(
            f"{name!r} did not start within {timeout:.1f} s: it was still starting up "
            "and has been stopped. Make the app's startup quicker, or pass a larger "
            "start_timeout.",
            name=name,
        )
        self.timeout = timeout


class AppStartupError(ServerStartError):
    kind: ClassVar[ProblemKind] = "startup_failed"

    def __init__(self, *, name: str, error: str, details: str = "") -> None:
        super().__init__(
            f"{name!r} did not start: its startup code raised {error.rstrip('.')}. "
            "Fix the app's startup (lifespan or on_startup handler) and start it again.",
            name=name,
        )
        self.error = error
        self.details = details


class ServerExitedError(ServerStartError):
    kind: ClassVar[ProblemKind] = "exited"

    def __init__(
        self, *, name: str, how: str, stderr_tail: str = "", source: str = "stderr"
    ) -> None:
        message = f"{name!r} did not start: {how} before it was serving."
        if stderr_tail:
            message += f" Last lines of its {source}:\n{stderr_tail}\n"
            message += "Fix the error above and start it again."
        else:
            message += " Start it again; pass port=0 if a fixed port may be taken."
        super().__init__(message, name=name)
        self.how = how
        self.stderr_tail = stderr_tail


class TargetLoadError(ServerStartError):
    """``reason`` says how loading failed (what the child reported); ``exception`` is the class
    name of what loading raised (``"SyntaxError"``), for a person reading it."""

    kind: ClassVar[ProblemKind] = "target_load_failed"

    def __init__(
        self,
        *,
        name: str,
        target: str,
        error: str,
        reason: LoadFailure,
        details: str = "",
        exception: str = "",
    ) -> None:
        super().__init__(
            f"{name!r} did not start: could not load {target}: {error}. "
            "Fix that error in the file and start it again.",
            name=name,
        )
        self.target = target
        self.error = error
        self.reason: LoadFailure = reason
        self.details = details
        self.exception = exception


class MemoryLimitExceeded(ServerStartError):
    """The kernel stopped the proxy while it started: it held more memory than allowed."""

    kind: ClassVar[ProblemKind] = "memory_limit"

    def __init__(self, *, name: str, limit_bytes: int) -> None:
        super().__init__(
            f"{name!r} was stopped while it started: it held more than "
            f"{limit_bytes // (1024 * 1024)} MiB of memory.",
            name=name,
        )
        self.limit_bytes = limit_bytes


class AlreadyStartedError(LabkitError, RuntimeError):
    """``start()`` on a server handle that was started before (a handle starts once)."""

    kind: ClassVar[ProblemKind] = "already_started"

    def __init__(self, *, name: str, handle: str) -> None:
        super().__init__(f"{name!r} was already started; make a new {handle}")
        self.name = name


class InvalidTargetError(InputError, ValueError):
    kind: ClassVar[ProblemKind] = "invalid_target"

    def __init__(self, target: str, problem: str) -> None:
        super().__init__(
            f"Expected a target like 'path/to/proxy.py' or 'package.module:app', "
            f"got {target!r}: {problem}."
        )
        self.target = target


class CaptureError(LabkitError):
    kind: ClassVar[ProblemKind] = "capture_failed"

    def __init__(self, *, url: str, error: str) -> None:
        super().__init__(
            f"Expected a response from {url}, but the request failed: {error}. "
            "Is the server running? Start it with serve(...) or start_mock_upstream() "
            "and use its .url."
        )
        self.url = url
        self.error = error


class MockUpstreamError(LabkitError):
    kind: ClassVar[ProblemKind] = "mock_upstream_unexpected"

    def __init__(self, *, url: str, expected: str, got: str, from_env: str | None = None) -> None:
        if from_env is None:
            advice = "Is that URL a mock upstream? Use the .url of start_mock_upstream()."
        else:  # the learner pointed the lab at a real server on purpose
            advice = (
                f"{from_env} points the lab at a server that does not answer as its mock "
                "upstream does. This cell needs the mock (its records, metrics or fault "
                "scenarios): unset "
                f"{from_env} and restart the kernel to run it; the cells of notebooks 01-03 "
                "run against a real server."
            )
        super().__init__(f"Expected {expected} from {url}, got {got}. {advice}")
        self.url = url


class EngineNotBuiltError(MachineLacks):
    kind: ClassVar[ProblemKind] = "engine_not_built"

    def __init__(self, *, cache: str) -> None:
        super().__init__(
            f"Expected the real engine (llama-server and its model) in {cache}, found none. "
            "Build it once with `make engine` (or `labkit engine build`; it takes minutes), "
            "or set LABKIT_ENGINE_URL to an OpenAI-compatible engine you run."
        )
        self.cache = cache


class EngineBuildError(LabkitError):
    kind: ClassVar[ProblemKind] = "engine_build_failed"

    def __init__(self, *, step: str, problem: str, fix: str) -> None:
        super().__init__(f"The engine build failed {step}: {problem}. To go on: {fix}.")
        self.step = step
        self.problem = problem
        self.fix = fix


class EngineReadError(InputError):
    kind: ClassVar[ProblemKind] = "engine_read_failed"

    def __init__(self, *, url: str, got: str) -> None:
        super().__init__(
            f"Expected the engine's own numbers from {url}, got {got}. Is it an "
            "OpenAI-compatible engine started with its metrics on (llama-server --metrics, "
            "vllm serve)? Use the handle start_engine() returns, or fix LABKIT_ENGINE_URL."
        )
        self.url = url
        self.got = got


class NginxNotFoundError(MachineLacks):
    """No nginx executable on this machine."""

    kind: ClassVar[ProblemKind] = "nginx_not_found"

    def __init__(self) -> None:
        super().__init__(
            "Expected an nginx executable on PATH or in /usr/sbin, found none. "
            + NGINX_INSTALL_HINT
        )


class RedisNotFoundError(MachineLacks):
    """No redis-server executable on this machine."""

    kind: ClassVar[ProblemKind] = "redis_not_found"

    def __init__(self) -> None:
        super().__init__(
            "Expected a redis-server executable on PATH or in /usr/sbin, found none. "
            + REDIS_INSTALL_HINT
        )


class GatewayFailure(LabkitError):
    """One upstream attempt of the stream gateway (``labkit.stream_gateway``) ended without a
    usable answer. The gateway catches it, and its ``reason`` (``upstream_status``,
    ``refusal``...) decides a restart and names the ``gateway.interrupted`` event; ``message``
    is what that event says."""

    kind: ClassVar[ProblemKind] = "gateway_attempt_failed"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ProxyFileError(InputError):
    """``proxy.py`` is missing, is not valid Python, or a part does not fit into it."""

    kind: ClassVar[ProblemKind] = "proxy_file_unusable"


class SolutionRegionError(InputError):
    """A solution region's delimiters do not pair up."""

    kind: ClassVar[ProblemKind] = "solution_regions_unpaired"


class UsageError(InputError):
    """The command line asks for something that cannot be done."""

    kind: ClassVar[ProblemKind] = "usage"


class SettingError(InputError):
    """A ``LABKIT_*`` environment variable whose value cannot be used (``labkit.settings``
    names each one, what it must be and what unset means)."""

    kind: ClassVar[ProblemKind] = "setting_invalid"

    def __init__(self, *, name: str, value: str, expected: str, default: str) -> None:
        super().__init__(
            f"{name}={value!r}, but it must be {expected}. Fix it, or unset {name} for the "
            f"default: {default}."
        )
        self.name = name
        self.value = value


class GradingError(InputError):
    """Submissions, or a file grading reads, that cannot be used (a path that does not exist,
    a zip with no proxy.py, verdicts a step wrote that are not JSON)."""

    kind: ClassVar[ProblemKind] = "grading_input_unusable"


class GraderEnvironmentError(MachineLacks):
    """The user that runs learner code (in the sandbox it gets) could not start the grader's
    Python and import what a proxy needs (``labkit.grading.environment``): every proxy would
    die before it served, through no fault of the learner's, so nothing is graded and no score
    is given."""

    kind: ClassVar[ProblemKind] = "grader_environment_broken"

    def __init__(
        self, *, user: str, python: str, imports: Sequence[str], problem: str, details: str = ""
    ) -> None:
        message = (
            f"The grader's environment is broken, not the submission: {user} could not start "
            f"{python} and import what a proxy needs ({', '.join(imports)}): {problem}."
        )
        if details:
            message += f" Last lines of its stderr:\n{details}\n"
        else:
            message += " "
        message += (
            "No submission was graded and no score was given. Make the interpreter, its "
            "libpython and the lab's packages readable by that user (install Python and the "
            "virtual environment outside a folder only its owner may enter, such as /root or "
            "one `mktemp -d` made); `labkit doctor` runs the same check. Then grade again."
        )
        super().__init__(message)
        self.user = user
        self.python = python
        self.problem = problem
        self.details = details


class SandboxUnavailableError(MachineLacks):
    """``LABKIT_SANDBOX`` names a sandbox that cannot run on this machine: nothing is graded
    rather than learner code run with less isolation than the instructor asked for."""

    kind: ClassVar[ProblemKind] = "sandbox_unavailable"

    def __init__(self, *, sandbox: str, why_not: str) -> None:
        super().__init__(
            f"LABKIT_SANDBOX={sandbox}, but {why_not}. Make {sandbox} work here, or unset "
            "LABKIT_SANDBOX to grade in the strongest sandbox this machine allows (each "
            "report names it)."
        )
        self.sandbox = sandbox
        self.why_not = why_not


class CgroupUnavailable(MachineLacks, RuntimeError):
    """No cgroup with these limits can be made here; the message says why."""

    kind: ClassVar[ProblemKind] = "cgroup_unavailable"


class NetworkSetupError(MachineLacks):
    """This process moved into a namespace of its own that is not usable (its loopback is
    down, or it holds no loopback): nothing could be graded in it."""

    kind: ClassVar[ProblemKind] = "network_setup_failed"


class RubricError(InputError):
    """A rubric file that cannot be used; the message says which key and what to write."""

    kind: ClassVar[ProblemKind] = "rubric_unusable"

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"Rubric {path}: {problem}. Fix the file.")
        self.path = path


class MergeError(InputError):
    """Shard folders that do not add up to one class; the message says which and why."""

    kind: ClassVar[ProblemKind] = "shards_do_not_merge"


class AnswersError(InputError):
    """The answers could not be collected or the marks could not be folded in."""

    kind: ClassVar[ProblemKind] = "answers_unusable"


class NotGradable(InputError):
    """The upload holds nothing that can be graded; the message says what to upload."""

    kind: ClassVar[ProblemKind] = "not_gradable"


class BrowserUnavailableError(MachineLacks):
    """No browser can run here: Playwright or Chromium is missing, or Chromium did not start."""

    kind: ClassVar[ProblemKind] = "browser_unavailable"


class ChatPageError(InputError):
    """A state machine that cannot go into the chat page (``labkit.chat.page_html``)."""

    kind: ClassVar[ProblemKind] = "chat_page_invalid"


class BundleError(InputError):
    """The instructor's notebooks, solution or rubric cannot make the learner bundle
    (``labkit.student``, ``labkit.grading.classroom``); the message says what to change."""

    kind: ClassVar[ProblemKind] = "bundle_unmakeable"


class ChatWaitTimeout(LabkitError, TimeoutError):
    """The chat page in the browser did not reach the state waited for in time
    (``labkit.chat.browser``); the message says what it showed instead."""

    kind: ClassVar[ProblemKind] = "chat_wait_timeout"


def _classes(root: type[LabkitError]) -> list[type[LabkitError]]:
    found = [root]
    for sub in root.__subclasses__():
        found += _classes(sub)
    return found


def exit_code_of(kind: ProblemKind) -> int:
    """The exit code of the error class whose kind is ``kind``; ``LabkitError``'s for a kind
    no class has."""
    found = (cls.exit_code for cls in _classes(LabkitError) if cls.kind == kind)
    return next(found, LabkitError.exit_code)


class RelayedError(LabkitError):
    """An error a child process stopped on (a grading worker's), raised again in the process
    that started it from what the child reported: its message, and its kind as ``cause``. It
    exits as the child's error would have (``exit_code_of(cause)``): a sandbox the worker
    could not use stops ``labkit grade`` with 3, as it would have in this process."""

    kind: ClassVar[ProblemKind] = "relayed"

    def __init__(self, message: str, *, cause: ProblemKind) -> None:
        super().__init__(message)
        self.cause: ProblemKind = cause
        self.exit_code = exit_code_of(cause)


def _shown(exc: LabkitError) -> str:
    """The error's message, then its notes (what the command line added: which option)."""
    return " ".join([str(exc), *getattr(exc, "__notes__", ())])


def run_command(body: Callable[[], int]) -> int:
    """``body()``'s exit status, with the handler every entry point shares: a ``LabkitError``
    becomes ``error: <message> <notes>`` on stderr and its ``exit_code``; argparse's exit (for
    ``--help``, or a command line it refused and said why) its status, 0 or
    ``ExitCode.INPUT``; Ctrl-C ``interrupted`` and ``ExitCode.INTERRUPTED``. Anything else is
    a bug in labkit and keeps its traceback."""
    try:
        return body()
    except LabkitError as exc:  # the class says which exit code
        print(f"error: {_shown(exc)}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # argparse's: --help (0) or a refused command line (2)
        return ExitCode.PASSED if exc.code in (0, None) else ExitCode.INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
