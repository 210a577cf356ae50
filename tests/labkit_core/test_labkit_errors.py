"""Every labkit error message, pinned: expected / got / what to do."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import labkit
import labkit.errors as errors
from labkit.errors import (
    AlreadyStartedError,
    AppStartupError,
    BundleError,
    CaptureError,
    EngineBuildError,
    EngineNotBuiltError,
    EngineReadError,
    GatewayFailure,
    GraderEnvironmentError,
    InputError,
    InvalidTargetError,
    LabkitError,
    MachineLacks,
    MemoryLimitExceeded,
    MockUpstreamError,
    NginxNotFoundError,
    NotGradable,
    PortInUseError,
    ProxyFileError,
    RedisNotFoundError,
    RelayedError,
    RubricError,
    SandboxUnavailableError,
    ServerExitedError,
    ServerStartError,
    SettingError,
    StartTimeoutError,
    TargetLoadError,
    UsageError,
)

PINNED: list[tuple[Exception, str]] = [
    (
        PortInUseError(name="proxy", host="127.0.0.1", port=8901),
        "'proxy' could not start on 127.0.0.1:8901: the port is already in use. "
        "Pass port=0 to pick a free port, or stop the server that holds it.",
    ),
    (
        StartTimeoutError(name="mock-upstream", timeout=5.0),
        "'mock-upstream' did not start within 5.0 s: it was still starting up and has been "
        "stopped. Make the app's startup quicker, or pass a larger start_timeout.",
    ),
    (
        AppStartupError(name="proxy", error="RuntimeError: boom"),
        "'proxy' did not start: its startup code raised RuntimeError: boom. Fix the app's "
        "startup (lifespan or on_startup handler) and start it again.",
    ),
    (  # Bug: a message that ends in a full stop (a learner stub's) got two. Fix: strip it.
        AppStartupError(name="proxy", error="NotImplementedError: write make_client."),
        "'proxy' did not start: its startup code raised NotImplementedError: write "
        "make_client. Fix the app's startup (lifespan or on_startup handler) and start it again.",
    ),
    (
        ServerExitedError(name="proxy", how="the server thread exited (uvicorn exit code 1)"),
        "'proxy' did not start: the server thread exited (uvicorn exit code 1) before it was "
        "serving. Start it again; pass port=0 if a fixed port may be taken.",
    ),
    (
        ServerExitedError(
            name="learner", how="the server process exited with code 1", stderr_tail="Oops"
        ),
        "'learner' did not start: the server process exited with code 1 before it was serving. "
        "Last lines of its stderr:\nOops\nFix the error above and start it again.",
    ),
    (
        TargetLoadError(
            name="learner",
            target="proxy.py",
            error="SyntaxError: bad (x.py, line 1)",
            reason="syntax_error",
        ),
        "'learner' did not start: could not load proxy.py: SyntaxError: bad (x.py, line 1). "
        "Fix that error in the file and start it again.",
    ),
    (
        InvalidTargetError("proxy", "it is neither a .py file nor a dotted module name"),
        "Expected a target like 'path/to/proxy.py' or 'package.module:app', got 'proxy': "
        "it is neither a .py file nor a dotted module name.",
    ),
    (
        CaptureError(url="http://127.0.0.1:1/v1", error="ConnectError: refused"),
        "Expected a response from http://127.0.0.1:1/v1, but the request failed: ConnectError: "
        "refused. Is the server running? Start it with serve(...) or start_mock_upstream() and "
        "use its .url.",
    ),
    (
        MockUpstreamError(url="http://h/debug/requests", expected="HTTP 200", got="HTTP 404"),
        "Expected HTTP 200 from http://h/debug/requests, got HTTP 404. Is that URL a mock "
        "upstream? Use the .url of start_mock_upstream().",
    ),
    (
        EngineNotBuiltError(cache="/c/engine"),
        "Expected the real engine (llama-server and its model) in /c/engine, found none. Build "
        "it once with `make engine` (or `labkit engine build`; it takes minutes), or set "
        "LABKIT_ENGINE_URL to an OpenAI-compatible engine you run.",
    ),
    (
        EngineBuildError(
            step="before starting",
            problem="this machine has no cmake",
            fix="install it (Debian/Ubuntu: apt-get install cmake g++ make), then run `make "
            "engine` again",
        ),
        "The engine build failed before starting: this machine has no cmake. To go on: install "
        "it (Debian/Ubuntu: apt-get install cmake g++ make), then run `make engine` again.",
    ),
    (
        EngineReadError(url="http://h/metrics", got="HTTP 404"),
        "Expected the engine's own numbers from http://h/metrics, got HTTP 404. Is it an "
        "OpenAI-compatible engine started with its metrics on (llama-server --metrics, vllm "
        "serve)? Use the handle start_engine() returns, or fix LABKIT_ENGINE_URL.",
    ),
    (
        MemoryLimitExceeded(name="submission-3", limit_bytes=384 * 1024 * 1024),
        "'submission-3' was stopped while it started: it held more than 384 MiB of memory.",
    ),
    (
        AlreadyStartedError(name="mock-upstream", handle="ThreadServer"),
        "'mock-upstream' was already started; make a new ThreadServer",
    ),
    (
        NginxNotFoundError(),
        "Expected an nginx executable on PATH or in /usr/sbin, found none. Install it with "
        "`apt-get install nginx` (Debian/Ubuntu, as root) or `conda install -c conda-forge "
        "nginx` (conda users; environment.yml lists it), then restart the kernel.",
    ),
    (
        RedisNotFoundError(),
        "Expected a redis-server executable on PATH or in /usr/sbin, found none. `make test` "
        "installs it when run as root on Debian/Ubuntu; otherwise install it with `apt-get "
        "install redis-server` (Debian/Ubuntu, as root), `brew install redis` (macOS) or `conda "
        "install -c conda-forge redis-server` (conda users; environment.yml lists it).",
    ),
    (
        GatewayFailure("refusal", "the model refused; held text was not shown"),
        "the model refused; held text was not shown",
    ),
    (
        SandboxUnavailableError(
            sandbox="bubblewrap",
            why_not="bwrap not found: install bubblewrap (Debian/Ubuntu: apt-get install "
            "bubblewrap)",
        ),
        "LABKIT_SANDBOX=bubblewrap, but bwrap not found: install bubblewrap (Debian/Ubuntu: "
        "apt-get install bubblewrap). Make bubblewrap work here, or unset LABKIT_SANDBOX to "
        "grade in the strongest sandbox this machine allows (each report names it).",
    ),
    (
        GraderEnvironmentError(
            user="the grading user (uid 61234, no sandbox of its own)",
            python="/autograder/venv/bin/python",
            imports=("fastapi", "redis"),
            problem="Python did not start (exit status 126)",
            details="prlimit: failed to execute /autograder/venv/bin/python: Permission denied",
        ),
        "The grader's environment is broken, not the submission: the grading user (uid 61234, "
        "no sandbox of its own) could not start /autograder/venv/bin/python and import what a "
        "proxy needs (fastapi, redis): Python did not start (exit status 126). Last lines of "
        "its stderr:\nprlimit: failed to execute /autograder/venv/bin/python: Permission "
        "denied\nNo submission was graded and no score was given. Make the interpreter, its "
        "libpython and the lab's packages readable by that user (install Python and the "
        "virtual environment outside a folder only its owner may enter, such as /root or one "
        "`mktemp -d` made); `labkit doctor` runs the same check. Then grade again.",
    ),
    (
        RubricError("rubric.toml", "weights.trickle is 'a lot', expected a number"),
        "Rubric rubric.toml: weights.trickle is 'a lot', expected a number. Fix the file.",
    ),
    (
        SettingError(
            name="LABKIT_NETWORK", value="none", expected="one of 'own', 'shared'", default="own"
        ),
        "LABKIT_NETWORK='none', but it must be one of 'own', 'shared'. Fix it, or unset "
        "LABKIT_NETWORK for the default: own.",
    ),
]


@pytest.mark.parametrize(("error", "message"), PINNED, ids=lambda v: type(v).__name__)
def test_message_is_pinned(error: Exception, message: str) -> None:
    assert str(error) == message


def test_every_error_class_that_builds_its_message_has_it_pinned() -> None:
    """A class whose constructor takes the facts writes the message here, so it is pinned
    here. The others take a whole message from the module that raises them (UsageError from
    the CLI, ProxyFileError from proxy_file...), whose own tests pin it; ServerStartError is
    one of those too, and the root of the start failures, and so is RelayedError (a worker's
    message, relayed)."""
    builds_its_message = {
        obj
        for obj in vars(errors).values()
        if inspect.isclass(obj) and issubclass(obj, LabkitError) and "__init__" in vars(obj)
    }
    pinned = {type(error) for error, _ in PINNED}
    assert builds_its_message - pinned == {ServerStartError, RelayedError}


def test_hierarchy_matches_the_docstring() -> None:
    for cls in (PortInUseError, StartTimeoutError, AppStartupError, ServerExitedError):
        assert issubclass(cls, ServerStartError)
    assert issubclass(TargetLoadError, ServerStartError)
    assert issubclass(InvalidTargetError, ValueError)
    for cls in (UsageError, SettingError, RubricError, ProxyFileError, NotGradable, BundleError):
        assert issubclass(cls, InputError)
    for cls in (NginxNotFoundError, EngineNotBuiltError, SandboxUnavailableError):
        assert issubclass(cls, MachineLacks)
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        if inspect.isclass(getattr(errors, name)):
            assert name in doc, f"{name} is missing from the hierarchy drawn in the docstring"


def _drawn_parents() -> dict[str, str]:
    """Each class in the docstring's drawing and the class it is drawn under."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z]\w+)\s", line)
        if not found or ("──" not in line and found.group(2) != "LabkitError"):
            continue
        depth = line.find(found.group(2))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[found.group(2)] = stack[-1][1]
        stack.append((depth, found.group(2)))
    return parents


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(sub) for sub in found))


def test_the_drawing_shows_every_labkit_error_class_under_its_parent() -> None:
    """Every class, NotGradable and CgroupUnavailable too (names not ending in Error)."""
    for module in pkgutil.walk_packages(labkit.__path__, "labkit."):
        importlib.import_module(module.name)  # classes defined outside errors.py too
    drawn = _drawn_parents()
    real = {
        cls.__name__: next(b for b in cls.__mro__[1:] if issubclass(b, LabkitError)).__name__
        for cls in _subclasses(LabkitError)
        if cls.__module__.startswith("labkit.")
    }
    assert drawn == real


def test_external_server_url_message_is_pinned() -> None:
    from labkit import ExternalServer

    with pytest.raises(ServerStartError) as info:
        ExternalServer("127.0.0.1:8001", name="mock-upstream")
    assert str(info.value) == (
        "Expected a URL like http://127.0.0.1:8001 for 'mock-upstream', got '127.0.0.1:8001'. "
        "Fix the URL (no /v1 suffix needed)."
    )


@pytest.mark.sockets
def test_unbindable_address_message_is_pinned() -> None:
    from labkit.servers import bind_socket

    with pytest.raises(ServerStartError) as info:
        bind_socket("192.0.2.1", 0, name="proxy")  # TEST-NET-1: not an address of this host
    assert str(info.value) == (
        "'proxy' could not start on 192.0.2.1:0: Cannot assign requested address. "
        "Use host='127.0.0.1' and port=0 unless you need something else."
    )
