"""Every error labkit raises, defined and drawn in one place.

The hierarchy::

    LabkitError                      root: catch this to catch anything labkit raises
    ├── ServerStartError             a server did not come up; nothing is left running
    │   ├── PortInUseError           the requested port is already taken
    │   ├── StartTimeoutError        still not serving when the start deadline passed
    │   ├── AppStartupError          the app's own startup (lifespan) raised
    │   ├── ServerExitedError        the server thread or child process ended early
    │   ├── TargetLoadError          a subprocess target could not be loaded; its ``reason``
    │   │                            (a LoadFailure) says how
    │   └── MemoryLimitExceeded      the kernel stopped a proxy for memory while it started
    ├── AlreadyStartedError          start() called on a server that was started before
    ├── InvalidTargetError           a serve_subprocess target that is neither a file nor mod:attr
    ├── CaptureError                 capture_stream could not get a response at all
    ├── MockUpstreamError            the mock's debug endpoints answered unexpectedly
    ├── EngineNotBuiltError          the real engine is not in the cache yet
    ├── EngineBuildError             the real engine could not be downloaded or built
    ├── EngineReadError              an engine's /metrics or /v1/models answered unexpectedly
    ├── NginxNotFoundError           no nginx executable on this machine
    ├── RedisNotFoundError           no redis-server executable on this machine
    ├── GatewayFailure               one upstream attempt of the stream gateway gave no usable
    │                                answer (its ``reason`` says why; the gateway catches it)
    ├── ProxyFileError               proxy.py is missing, not Python, or a part does not fit
    ├── SolutionRegionError          solution-region delimiters that do not pair up
    ├── UsageError                   a command line that cannot be done
    ├── SettingError                 a LABKIT_* environment variable with a value that cannot be
    │                                used (labkit.settings)
    ├── GradingError                 grading could not be set up
    ├── GraderEnvironmentError       the grading user cannot start the grader's Python or
    │                                import what a proxy needs: nothing is graded
    ├── SandboxUnavailableError      the sandbox LABKIT_SANDBOX names cannot run here
    ├── CgroupUnavailable            no cgroup with the wanted limits can be made here
    ├── NetworkSetupError            a grading's own network namespace is not usable
    ├── RubricError                  a rubric file that cannot be used
    ├── MergeError                   shard folders that do not add up to one class
    ├── AnswersError                 written answers that cannot be collected, marks that cannot
    │                                be folded in
    ├── NotGradable                  an upload that holds nothing to grade
    └── BrowserUnavailableError      no headless Chromium can run here

Each class carries, as click's exceptions do, what a program needs to act on it without
reading its text: ``kind``, a stable snake_case id of its own, and ``exit_code``, what
``labkit`` exits with when a command stops on it (2, a usage or setup error, for every one of
them: 1 means a check failed). A failure with finer kinds carries them as data too
(``TargetLoadError.reason``, ``GatewayFailure.reason``), so no verdict depends on the wording
of a message.

Each message says what was expected, what happened instead and what to do. The constructors
here that take the facts build the message, so that wording lives here and a test pins it
(``tests/labkit_core/test_labkit_errors.py``, which also keeps this drawing complete); the
classes that take a whole message get it from the module that raises them, whose tests pin it.
The modules that raise a class also export it (``from labkit.grading.roster import
GradingError`` works).

Library code raises; an entry point (``labkit``, ``python -m labkit.grading.classroom``) runs
its body through ``run_command``, the one handler that shows a ``LabkitError`` as one line,
``error: <message>`` on stderr, and exits with its ``exit_code``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import ClassVar, Final, Literal

__all__ = [
    "INTERRUPTED_EXIT_CODE",
    "NGINX_INSTALL_HINT",
    "REDIS_INSTALL_HINT",
    "AlreadyStartedError",
    "AnswersError",
    "AppStartupError",
    "BrowserUnavailableError",
    "CaptureError",
    "CgroupUnavailable",
    "EngineBuildError",
    "EngineNotBuiltError",
    "EngineReadError",
    "GatewayFailure",
    "GraderEnvironmentError",
    "GradingError",
    "InvalidTargetError",
    "LabkitError",
    "LoadFailure",
    "MemoryLimitExceeded",
    "MergeError",
    "MockUpstreamError",
    "NetworkSetupError",
    "NginxNotFoundError",
    "NotGradable",
    "PortInUseError",
    "ProxyFileError",
    "RedisNotFoundError",
    "RubricError",
    "SandboxUnavailableError",
    "ServerExitedError",
    "ServerStartError",
    "SettingError",
    "SolutionRegionError",
    "StartTimeoutError",
    "TargetLoadError",
    "UsageError",
    "run_command",
]

#: How loading a subprocess target failed, as the child saw it (by the class of what loading
#: raised, or by where it stopped): a typo, a missing import, no ``app`` in the module, or
#: anything else the module raised while it was imported. The grader reports it as the kind of
#: the submission's problem.
LoadFailure = Literal["syntax_error", "import_error", "no_app", "load_error"]

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

    kind: ClassVar[str] = "labkit_error"
    #: what ``labkit`` exits with when a command stops on this error: a usage or setup error
    exit_code: ClassVar[int] = 2


class ServerStartError(LabkitError):
    """A server did not start. Whatever was started has been stopped again."""

    kind: ClassVar[str] = "server_start_failed"

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class PortInUseError(ServerStartError):
    kind: ClassVar[str] = "port_in_use"

    def __init__(self, *, name: str, host: str, port: int) -> None:
        super().__init__(
            f"{name!r} could not start on {host}:{port}: the port is already in use. "
            "Pass port=0 to pick a free port, or stop the server that holds it.",
            name=name,
        )
        self.host = host
        self.port = port


class StartTimeoutError(ServerStartError):
    kind: ClassVar[str] = "start_timeout"

    def __init__(self, *, name: str, timeout: float) -> None:
        super().__init__(
            f"{name!r} did not start within {timeout:.1f} s: it was still starting up "
            "and has been stopped. Make the app's startup quicker, or pass a larger "
            "start_timeout.",
            name=name,
        )
        self.timeout = timeout


class AppStartupError(ServerStartError):
    kind: ClassVar[str] = "app_startup_failed"

    def __init__(self, *, name: str, error: str, details: str = "") -> None:
        super().__init__(
            f"{name!r} did not start: its startup code raised {error.rstrip('.')}. "
            "Fix the app's startup (lifespan or on_startup handler) and start it again.",
            name=name,
        )
        self.error = error
        self.details = details


class ServerExitedError(ServerStartError):
    kind: ClassVar[str] = "server_exited"

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

    kind: ClassVar[str] = "target_load_failed"

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

    kind: ClassVar[str] = "memory_limit_exceeded"

    def __init__(self, *, name: str, limit_bytes: int) -> None:
        super().__init__(
            f"{name!r} was stopped while it started: it held more than "
            f"{limit_bytes // (1024 * 1024)} MiB of memory.",
            name=name,
        )
        self.limit_bytes = limit_bytes


class AlreadyStartedError(LabkitError, RuntimeError):
    """``start()`` on a server handle that was started before (a handle starts once)."""

    kind: ClassVar[str] = "already_started"

    def __init__(self, *, name: str, handle: str) -> None:
        super().__init__(f"{name!r} was already started; make a new {handle}")
        self.name = name


class InvalidTargetError(LabkitError, ValueError):
    kind: ClassVar[str] = "invalid_target"

    def __init__(self, target: str, problem: str) -> None:
        super().__init__(
            f"Expected a target like 'path/to/proxy.py' or 'package.module:app', "
            f"got {target!r}: {problem}."
        )
        self.target = target


class CaptureError(LabkitError):
    kind: ClassVar[str] = "capture_failed"

    def __init__(self, *, url: str, error: str) -> None:
        super().__init__(
            f"Expected a response from {url}, but the request failed: {error}. "
            "Is the server running? Start it with serve(...) or start_mock_upstream() "
            "and use its .url."
        )
        self.url = url
        self.error = error


class MockUpstreamError(LabkitError):
    kind: ClassVar[str] = "mock_upstream_unexpected"

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


class EngineNotBuiltError(LabkitError):
    kind: ClassVar[str] = "engine_not_built"

    def __init__(self, *, cache: str) -> None:
        super().__init__(
            f"Expected the real engine (llama-server and its model) in {cache}, found none. "
            "Build it once with `make engine` (or `labkit engine build`; it takes minutes), "
            "or set LABKIT_ENGINE_URL to an OpenAI-compatible engine you run."
        )
        self.cache = cache


class EngineBuildError(LabkitError):
    kind: ClassVar[str] = "engine_build_failed"

    def __init__(self, *, step: str, problem: str, fix: str) -> None:
        super().__init__(f"The engine build failed {step}: {problem}. To go on: {fix}.")
        self.step = step
        self.problem = problem
        self.fix = fix


class EngineReadError(LabkitError):
    kind: ClassVar[str] = "engine_read_failed"

    def __init__(self, *, url: str, got: str) -> None:
        super().__init__(
            f"Expected the engine's own numbers from {url}, got {got}. Is it an "
            "OpenAI-compatible engine started with its metrics on (llama-server --metrics, "
            "vllm serve)? Use the handle start_engine() returns, or fix LABKIT_ENGINE_URL."
        )
        self.url = url
        self.got = got


class NginxNotFoundError(LabkitError):
    """No nginx executable on this machine."""

    kind: ClassVar[str] = "nginx_not_found"

    def __init__(self) -> None:
        super().__init__(
            "Expected an nginx executable on PATH or in /usr/sbin, found none. "
            + NGINX_INSTALL_HINT
        )


class RedisNotFoundError(LabkitError):
    """No redis-server executable on this machine."""

    kind: ClassVar[str] = "redis_not_found"

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

    kind: ClassVar[str] = "gateway_attempt_failed"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ProxyFileError(LabkitError):
    """``proxy.py`` is missing, is not valid Python, or a part does not fit into it."""

    kind: ClassVar[str] = "proxy_file_unusable"


class SolutionRegionError(LabkitError):
    """A solution region's delimiters do not pair up."""

    kind: ClassVar[str] = "solution_regions_unpaired"


class UsageError(LabkitError):
    """The command line asks for something that cannot be done; exit code 2."""

    kind: ClassVar[str] = "usage"
    exit_code: ClassVar[int] = 2


class SettingError(LabkitError):
    """A ``LABKIT_*`` environment variable whose value cannot be used (``labkit.settings``
    names each one, what it must be and what unset means)."""

    kind: ClassVar[str] = "setting_invalid"

    def __init__(self, *, name: str, value: str, expected: str, default: str) -> None:
        super().__init__(
            f"{name}={value!r}, but it must be {expected}. Fix it, or unset {name} for the "
            f"default: {default}."
        )
        self.name = name
        self.value = value


class GradingError(LabkitError):
    """Grading could not be set up (bad paths, a worker that could not start the mocks)."""

    kind: ClassVar[str] = "grading_setup_failed"


class GraderEnvironmentError(LabkitError):
    """The user that runs learner code (in the sandbox it gets) could not start the grader's
    Python and import what a proxy needs (``labkit.grading.environment``): every proxy would
    die before it served, through no fault of the learner's, so nothing is graded and no score
    is given."""

    kind: ClassVar[str] = "grader_environment_broken"

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


class SandboxUnavailableError(LabkitError):
    """``LABKIT_SANDBOX`` names a sandbox that cannot run on this machine: nothing is graded
    rather than learner code run with less isolation than the instructor asked for."""

    kind: ClassVar[str] = "sandbox_unavailable"

    def __init__(self, *, sandbox: str, why_not: str) -> None:
        super().__init__(
            f"LABKIT_SANDBOX={sandbox}, but {why_not}. Make {sandbox} work here, or unset "
            "LABKIT_SANDBOX to grade in the strongest sandbox this machine allows (each "
            "report names it)."
        )
        self.sandbox = sandbox
        self.why_not = why_not


class CgroupUnavailable(LabkitError, RuntimeError):
    """No cgroup with these limits can be made here; the message says why."""

    kind: ClassVar[str] = "cgroup_unavailable"


class NetworkSetupError(LabkitError):
    """This process moved into a namespace of its own that is not usable (its loopback is
    down, or it holds no loopback): nothing could be graded in it."""

    kind: ClassVar[str] = "network_setup_failed"


class RubricError(LabkitError):
    """A rubric file that cannot be used; the message says which key and what to write."""

    kind: ClassVar[str] = "rubric_unusable"

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"Rubric {path}: {problem}. Fix the file, or leave --rubric out.")
        self.path = path


class MergeError(LabkitError):
    """Shard folders that do not add up to one class; the message says which and why."""

    kind: ClassVar[str] = "shards_do_not_merge"


class AnswersError(LabkitError):
    """The answers could not be collected or the marks could not be folded in."""

    kind: ClassVar[str] = "answers_unusable"


class NotGradable(LabkitError):
    """The upload holds nothing that can be graded; the message says what to upload."""

    kind: ClassVar[str] = "not_gradable"


class BrowserUnavailableError(LabkitError):
    """No browser can run here: Playwright or Chromium is missing, or Chromium did not start."""

    kind: ClassVar[str] = "browser_unavailable"


#: What a command exits with when it is interrupted (Ctrl-C): it did not finish what it was
#: asked, as for a usage or setup error.
INTERRUPTED_EXIT_CODE: Final = 2


def run_command(body: Callable[[], int]) -> int:
    """``body()``'s exit status, with the handler every entry point shares: a ``LabkitError``
    becomes ``error: <message>`` on stderr and its ``exit_code``, Ctrl-C becomes
    ``interrupted`` and ``INTERRUPTED_EXIT_CODE``. Anything else is a bug in labkit and keeps
    its traceback."""
    try:
        return body()
    except LabkitError as exc:  # a usage or setup error: the class says which exit code
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
