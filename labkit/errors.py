"""Every error labkit raises, drawn in one place.

The hierarchy (classes defined in another module say which)::

    LabkitError                      root: catch this to catch anything labkit raises
    ├── ServerStartError             a server did not come up; nothing is left running
    │   ├── PortInUseError           the requested port is already taken
    │   ├── StartTimeoutError        still not serving when the start deadline passed
    │   ├── AppStartupError          the app's own startup (lifespan) raised
    │   ├── ServerExitedError        the server thread or child process ended early
    │   ├── TargetLoadError          a subprocess target could not be imported
    │   └── MemoryLimitExceeded      the kernel stopped a proxy for memory (grading.sandbox)
    ├── InvalidTargetError           a serve_subprocess target that is neither a file nor mod:attr
    ├── CaptureError                 capture_stream could not get a response at all
    ├── MockUpstreamError            the mock's debug endpoints answered unexpectedly
    ├── EngineNotBuiltError          the real engine is not in the cache yet
    ├── EngineBuildError             the real engine could not be downloaded or built
    ├── EngineReadError              an engine's /metrics or /v1/models answered unexpectedly
    ├── NginxNotFoundError           no nginx executable on this machine (nginx)
    ├── ProxyFileError               proxy.py is missing, not Python, or a part does not fit
    │                                (proxy_file)
    ├── SolutionRegionError          solution-region delimiters that do not pair up (regions)
    ├── UsageError                   a command line that cannot be done; exit code 2 (cli)
    ├── GradingError                 grading could not be set up (grading.roster)
    ├── RubricError                  a rubric file that cannot be used (grading.rubric)
    ├── MergeError                   shard folders that do not add up to one class
    │                                (grading.class_results)
    ├── AnswersError                 written answers that cannot be collected, marks that cannot
    │                                be folded in (grading.answers)
    ├── NetworkSetupError            a grading's own network namespace is not usable
    │                                (grading.network)
    └── BrowserUnavailableError      no headless Chromium can run here (chat.browser)

Each message says what was expected, what happened instead and what to do. The constructors
of the classes here take the facts and build the message, so the wording lives here and a test
pins it (``tests/labkit_core/test_labkit_errors.py``, which also keeps this drawing complete).
"""

from __future__ import annotations

__all__ = [
    "AppStartupError",
    "CaptureError",
    "EngineBuildError",
    "EngineNotBuiltError",
    "EngineReadError",
    "InvalidTargetError",
    "LabkitError",
    "MockUpstreamError",
    "PortInUseError",
    "ServerExitedError",
    "ServerStartError",
    "StartTimeoutError",
    "TargetLoadError",
]


class LabkitError(Exception):
    """Root of every error labkit raises."""


class ServerStartError(LabkitError):
    """A server did not start. Whatever was started has been stopped again."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class PortInUseError(ServerStartError):
    def __init__(self, *, name: str, host: str, port: int) -> None:
        super().__init__(
            f"{name!r} could not start on {host}:{port}: the port is already in use. "
            "Pass port=0 to pick a free port, or stop the server that holds it.",
            name=name,
        )
        self.host = host
        self.port = port


class StartTimeoutError(ServerStartError):
    def __init__(self, *, name: str, timeout: float) -> None:
        super().__init__(
            f"{name!r} did not start within {timeout:.1f} s: it was still starting up "
            "and has been stopped. Make the app's startup quicker, or pass a larger "
            "start_timeout.",
            name=name,
        )
        self.timeout = timeout


class AppStartupError(ServerStartError):
    def __init__(self, *, name: str, error: str, details: str = "") -> None:
        super().__init__(
            f"{name!r} did not start: its startup code raised {error.rstrip('.')}. "
            "Fix the app's startup (lifespan or on_startup handler) and start it again.",
            name=name,
        )
        self.error = error
        self.details = details


class ServerExitedError(ServerStartError):
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
    """``exception`` is the class name of what loading raised (``"SyntaxError"``), when known."""

    def __init__(
        self, *, name: str, target: str, error: str, details: str = "", exception: str = ""
    ) -> None:
        super().__init__(
            f"{name!r} did not start: could not load {target}: {error}. "
            "Fix that error in the file and start it again.",
            name=name,
        )
        self.target = target
        self.error = error
        self.details = details
        self.exception = exception


class InvalidTargetError(LabkitError, ValueError):
    def __init__(self, target: str, problem: str) -> None:
        super().__init__(
            f"Expected a target like 'path/to/proxy.py' or 'package.module:app', "
            f"got {target!r}: {problem}."
        )
        self.target = target


class CaptureError(LabkitError):
    def __init__(self, *, url: str, error: str) -> None:
        super().__init__(
            f"Expected a response from {url}, but the request failed: {error}. "
            "Is the server running? Start it with serve(...) or start_mock_upstream() "
            "and use its .url."
        )
        self.url = url
        self.error = error


class MockUpstreamError(LabkitError):
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
    def __init__(self, *, cache: str) -> None:
        super().__init__(
            f"Expected the real engine (llama-server and its model) in {cache}, found none. "
            "Build it once with `make engine` (or `labkit engine build`; it takes minutes), "
            "or set LABKIT_ENGINE_URL to an OpenAI-compatible engine you run."
        )
        self.cache = cache


class EngineBuildError(LabkitError):
    def __init__(self, *, step: str, problem: str, fix: str) -> None:
        super().__init__(f"The engine build failed {step}: {problem}. To go on: {fix}.")
        self.step = step
        self.problem = problem
        self.fix = fix


class EngineReadError(LabkitError):
    def __init__(self, *, url: str, got: str) -> None:
        super().__init__(
            f"Expected the engine's own numbers from {url}, got {got}. Is it an "
            "OpenAI-compatible engine started with its metrics on (llama-server --metrics, "
            "vllm serve)? Use the handle start_engine() returns, or fix LABKIT_ENGINE_URL."
        )
        self.url = url
        self.got = got
