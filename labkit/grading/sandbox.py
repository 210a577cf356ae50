"""Where learner code runs: a stripped environment, a temporary directory, a child process.

``clean_env`` keeps only what Python needs to start (no API keys, no cloud tokens, no HTTP proxy
settings). ``start_proxy`` serves a submission in a child process; ``problem_from`` turns every
way that can fail (syntax error, import error, no ``app``, a startup that raises, an endless loop
at import) into a ``Problem`` with a plain message and what to do next. The problem's kind comes
from the error's class and, for a file that could not be loaded, from the kind the child
reported (``TargetLoadError.reason``), never from a message's wording: rewording a message
changes no verdict (``tests/labkit_core/test_error_kinds.py`` rewords them all).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import psutil

from labkit.checks.machine import Budget
from labkit.errors import (
    AppStartupError,
    LabkitError,
    LoadFailure,
    MemoryLimitExceeded,
    ServerExitedError,
    ServerStartError,
    StartTimeoutError,
    TargetLoadError,
)
from labkit.grading.isolation import Confinement, Isolation, choose
from labkit.grading.report import Problem
from labkit.servers import CHILD_MODULE, SubprocessServer, next_name
from labkit.settings import NETWORK, SANDBOX

__all__ = [
    "KEPT_ENV",
    "PROXY_START_TIMEOUT_S",
    "MemoryLimitExceeded",
    "SandboxedProxy",
    "clean_env",
    "problem_from",
    "start_proxy",
]

# LABKIT_SANDBOX is the instructor's choice of sandbox (labkit.grading.isolation.choose),
# LABKIT_NETWORK of network (labkit.grading.network.enter_own_namespace): the worker needs them
# (labkit.settings)
KEPT_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "PYTHONPATH",
    "SYSTEMROOT",
    SANDBOX.name,
    NETWORK.name,
)
PROXY_START_TIMEOUT_S = 8.0
AGAIN = "Fix it and grade again."


def clean_env(
    home: str | os.PathLike[str], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """An environment with nothing secret in it: a few locale and path variables, ``home``."""
    env = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    if "PYTHONPATH" in env:  # as this process reads it, whichever folder the child starts in
        folders = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(f) for f in folders if f)
    env.update(
        HOME=os.fspath(home),
        TMPDIR=os.fspath(home),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


class SandboxedProxy(SubprocessServer):
    """A submission's proxy in its sandbox; stopping it also empties and removes its cgroup."""

    def __init__(self, *args: Any, confinement: Confinement, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.confinement = confinement

    def memory_exceeded(self) -> bool:
        return self.confinement.memory_exceeded()

    @property
    def server_pid(self) -> int | None:
        """The Python process that serves the app (inside the sandbox's wrappers), for
        measuring its memory; the wrapper's own pid if it cannot be found."""
        if self.process is None:
            return None
        try:
            outer = psutil.Process(self.process.pid)
            for process in [outer, *outer.children(recursive=True)]:
                # the wrappers' own command lines hold the served command as arguments
                if process.cmdline()[1:3] == ["-m", CHILD_MODULE]:
                    return int(process.pid)
        except psutil.Error:
            pass
        return self.process.pid

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.confinement.release()  # kills what is left in its cgroup first


def start_proxy(
    submission: Path,
    *,
    upstream_url: str,
    usage_log: Path,
    cwd: Path,
    isolation: Isolation | None = None,
    together: int = 1,
    budget: Budget,
    settings: Mapping[str, str] | None = None,
) -> SandboxedProxy:
    """Serve ``submission``'s ``app`` in a child process with a clean environment, inside
    ``isolation`` (default: the strongest this machine allows, see ``labkit.grading.isolation``).
    ``together``: how many proxies the caller starts at once, this one included; they share the
    ``budget``'s CPUs (the grading's, handed down), so each may take that much
    longer (``Budget.start_scale``). ``settings``: more environment for the proxy, the settings
    its checks need (``labkit.checks.catalogue.proxy_env_for``).

    Raises ``ServerStartError`` (a subclass per way of failing; see ``problem_from``).
    """
    isolation = isolation or choose()
    machine = budget
    given = {"UPSTREAM_URL": upstream_url, "USAGE_LOG": os.fspath(usage_log)}
    env = clean_env(cwd, {**(settings or {}), **given})
    confinement = Confinement.create(isolation)
    isolation.prepare([cwd])

    def wrap(command: list[str], own_dir: Path) -> list[str]:
        isolation.prepare([own_dir])
        return confinement.wrap(command, writable=[cwd, own_dir])

    proxy = SandboxedProxy(
        os.fspath(submission),
        name=next_name("submission"),
        env=env,
        inherit_env=False,
        cwd=cwd,
        start_timeout=PROXY_START_TIMEOUT_S * machine.start_scale(together),
        wrap=wrap,
        confinement=confinement,
    )
    try:
        return cast(SandboxedProxy, proxy.start())
    except BaseException as exc:
        if confinement.release() and isinstance(exc, ServerStartError):
            raise MemoryLimitExceeded(
                name=proxy.name, limit_bytes=isolation.limits.memory_bytes
            ) from exc
        raise


def problem_from(exc: BaseException, file_name: str) -> Problem:
    """A plain account of why the proxy in ``file_name`` did not start, and what to do. Its
    kind is the error's (``exc.kind``); a file that could not be loaded, how the child saw it
    fail (``TargetLoadError.reason``); anything but a ``LabkitError``, ``start_failed``."""
    if isinstance(exc, MemoryLimitExceeded):
        limit = exc.limit_bytes // (1024 * 1024)
        return Problem(
            exc.kind,
            f"the proxy in {file_name} was stopped: it held more than {limit} MiB of memory "
            f"while it started (the limit for one proxy process). {AGAIN}",
        )
    if isinstance(exc, TargetLoadError):  # the problem's kind is how the child saw it fail
        return Problem(exc.reason, _load_message(exc.reason, exc.error, file_name), exc.details)
    if isinstance(exc, AppStartupError):
        return Problem(
            exc.kind,
            f"the app in {file_name} failed at startup: {exc.error}. Check its lifespan or "
            f"startup code (it runs with UPSTREAM_URL and USAGE_LOG set). {AGAIN}",
            exc.details,
        )
    if isinstance(exc, StartTimeoutError):
        return Problem(
            exc.kind,
            f"the proxy in {file_name} did not start within {exc.timeout:g} s: is there an "
            f"endless loop or a long wait at import or startup? {AGAIN}",
        )
    if isinstance(exc, ServerExitedError):
        return Problem(
            exc.kind,
            f"the proxy in {file_name} exited before it was serving ({exc.how}). {AGAIN}",
            exc.stderr_tail,
        )
    if isinstance(exc, LabkitError):
        return Problem(exc.kind, f"the proxy in {file_name} did not start: {exc}")
    return Problem(ServerStartError.kind, f"the proxy in {file_name} did not start: {exc!r}")


def _load_message(reason: LoadFailure, error: str, file_name: str) -> str:
    if reason == "syntax_error":
        return f"{file_name} has a syntax error: {error}. {AGAIN}"
    if reason == "import_error":
        return (
            f"{file_name} could not be imported: {error}. Use only the packages the lab "
            f"installs (fastapi, starlette, httpx, ...). {AGAIN}"
        )
    if reason == "no_app":
        return (
            f"{file_name} defines no module-level `app`: the grader serves `app` "
            f"(e.g. `app = FastAPI()`). {AGAIN}"
        )
    return f"{file_name} raised while it was imported: {error}. {AGAIN}"
