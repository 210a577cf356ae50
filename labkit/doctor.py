"""``labkit doctor``: is this machine ready for the lab? One line per thing, OK or a fix.

``run_doctor()`` returns structured lines and prints nothing; ``format_doctor()`` renders them and
``doctor_exit_code()`` decides the exit status, so the CLI is three calls. A line is ``ok``,
``warn`` (something only one optional step needs, e.g. nginx, redis-server, or the browser
notebook 14 drives) or ``fail`` (fix it before starting). The ``grading user`` line is the
grader's own check before a session (``labkit.grading.environment``): a machine where it fails
grades nothing.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from labkit.packaging import installed_distribution

__all__ = [
    "DISTRIBUTION",
    "DoctorLine",
    "DoctorStatus",
    "doctor_exit_code",
    "format_doctor",
    "run_doctor",
]

DISTRIBUTION = installed_distribution()
DoctorStatus = Literal["ok", "warn", "fail"]
_REINSTALL = (
    "run `make lab` (or `.venv/bin/pip install -e '.[dev]'`) to install the pinned versions"
)
_MARKS: dict[DoctorStatus, str] = {"ok": "OK  ", "warn": "WARN", "fail": "FIX "}


@dataclass(frozen=True)
class DoctorLine:
    """One diagnosis: what was checked, its status, what was found, and the fix if any."""

    check: str
    status: DoctorStatus
    found: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _check_python() -> DoctorLine:
    found = f"Python {sys.version.split()[0]} ({sys.executable})"
    try:
        requires = importlib.metadata.metadata(DISTRIBUTION)["Requires-Python"] or ""
    except importlib.metadata.PackageNotFoundError:
        return DoctorLine("python", "fail", found, f"{DISTRIBUTION} is not installed: {_REINSTALL}")
    if requires and Version(".".join(map(str, sys.version_info[:3]))) not in SpecifierSet(requires):
        return DoctorLine(
            "python", "fail", f"{found}, needs {requires}", f"use a Python {requires}: {_REINSTALL}"
        )
    return DoctorLine("python", "ok", found)


def _check_packages() -> list[DoctorLine]:
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []  # reported by _check_python
    lines = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an optional extra (dev tools), not needed to run the lab
        name, spec = requirement.name, requirement.specifier
        check = f"package {name}"
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            lines.append(DoctorLine(check, "fail", f"not installed, needs {spec}", _REINSTALL))
            continue
        try:
            in_range = spec.contains(Version(installed), prereleases=True)
        except InvalidVersion:
            in_range = False
        if in_range:
            lines.append(DoctorLine(check, "ok", f"{installed} (pinned {spec})"))
        else:
            lines.append(DoctorLine(check, "fail", f"{installed}, needs {spec}", _REINSTALL))
    return lines


def _check_kernel() -> DoctorLine:
    try:
        import ipykernel  # noqa: F401
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        return DoctorLine("kernel", "fail", "ipykernel is not installed", _REINSTALL)
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        return DoctorLine(
            "kernel",
            "fail",
            "no 'python3' kernel",
            "run `python -m ipykernel install --sys-prefix`",
        )
    executable = spec.argv[0] if spec.argv else ""
    found = f"ipykernel {importlib.metadata.version('ipykernel')}, python3 kernel runs {executable}"
    same = executable in ("python", "python3", "{python}") or _same_file(executable, sys.executable)
    if not same:
        return DoctorLine(
            "kernel",
            "warn",
            found + f", not this Python ({sys.executable})",
            "run `python -m ipykernel install --sys-prefix` with the lab's Python so notebooks "
            "see the lab's packages",
        )
    return DoctorLine("kernel", "ok", found)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_bind() -> DoctorLine:
    from labkit.errors import ServerStartError
    from labkit.servers import bind_socket

    try:
        sock = bind_socket("127.0.0.1", 0, name="doctor")
    except ServerStartError as exc:
        return DoctorLine(
            "localhost ports",
            "fail",
            str(exc),
            "the lab needs to listen on 127.0.0.1; allow it in your sandbox or firewall",
        )
    port = sock.getsockname()[1]
    sock.close()
    return DoctorLine("localhost ports", "ok", f"can listen on 127.0.0.1 (got port {port})")


def _find_program(name: str) -> str | None:
    found = shutil.which(name)
    if found is None:
        for folder in ("/usr/sbin", "/usr/local/sbin", "/sbin"):
            candidate = Path(folder) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return found


def _check_program(name: str, needed_for: str, *, brew: str | None = None) -> DoctorLine:
    """``name`` on PATH or in an sbin folder; its Debian and conda-forge packages share its name,
    Homebrew's is ``brew`` when it differs (redis-server comes in ``redis``)."""
    found = _find_program(name)
    if found is not None:
        return DoctorLine(name, "ok", found)
    return DoctorLine(
        name,
        "warn",
        f"not found (only needed for {needed_for})",
        f"`apt-get install {name}` (Debian/Ubuntu), `brew install {brew or name}` (macOS) "
        f"or `conda install -c conda-forge {name}`",
    )


def _check_redis_server() -> DoctorLine:
    return _check_program(
        "redis-server", "notebook 15 and the resumable-stream tests", brew="redis"
    )


_BROWSER_NEEDED = "only needed for notebook 14's browser cells"


def _playwright_requirement() -> str:
    """The playwright range this project pins (its ``dev`` extra), as pip would take it."""
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name == "playwright":
            return f"playwright{requirement.specifier}"
    return "playwright"


def _chromium_version(executable: str) -> str | None:
    try:
        ran = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in ran.stdout.splitlines() if line.strip()]
    return lines[-1] if ran.returncode == 0 and lines else None


def _check_browser() -> DoctorLine:
    from labkit.chat.browser import CHROMIUM_ENV, find_chromium
    from labkit.settings import CHROMIUM

    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return DoctorLine(
            "browser",
            "warn",
            f"the playwright package is not installed ({_BROWSER_NEEDED})",
            f"`.venv/bin/pip install '{_playwright_requirement()}'` (no browser download: "
            "it drives the system's Chromium)",
        )
    driver = f"playwright {importlib.metadata.version('playwright')}"
    chromium = find_chromium()
    configured = CHROMIUM.read()
    if chromium is None:
        missing = (
            f"{CHROMIUM_ENV}={configured} is not an executable file"
            if configured
            else "no Chromium on PATH (chromium, chromium-browser or google-chrome)"
        )
        return DoctorLine(
            "browser",
            "warn",
            f"{driver}, {missing} ({_BROWSER_NEEDED})",
            f"`apt-get install chromium` (Debian/Ubuntu), or set {CHROMIUM_ENV} to a Chromium "
            "or Chrome binary",
        )
    version = _chromium_version(chromium)
    if version is None:
        return DoctorLine(
            "browser",
            "warn",
            f"{driver}, {chromium} does not run (`{chromium} --version` failed; {_BROWSER_NEEDED})",
            f"reinstall it (`apt-get install --reinstall chromium`), or set {CHROMIUM_ENV} to "
            "a Chromium that runs",
        )
    return DoctorLine("browser", "ok", f"{driver}, {version} at {chromium}")


def _check_mock_upstream() -> DoctorLine:
    from labkit.capture import capture_stream
    from labkit.errors import LabkitError
    from labkit.servers import UPSTREAM_URL_ENV, serve
    from labkit.settings import UPSTREAM_URL

    request = {
        "model": "mock-1",
        "stream": True,
        "messages": [{"role": "user", "content": "doctor"}],
        "mock": {"ttft_ms": 0, "tps": 1000, "tokens": 5},
    }
    try:
        external = UPSTREAM_URL.read()
    except LabkitError as exc:  # a value that is not a URL
        return DoctorLine("mock upstream", "fail", str(exc), f"fix or unset {UPSTREAM_URL_ENV}")
    where = f"{UPSTREAM_URL_ENV}={external}" if external else "a mock upstream on a thread"
    try:
        if external:
            capture = capture_stream(f"{external.rstrip('/')}/v1/chat/completions", json=request)
        else:
            from mock_upstream import create_app

            with serve(create_app(), name="doctor-mock-upstream") as server:
                capture = capture_stream(f"{server.url}/v1/chat/completions", json=request)
    except (LabkitError, ImportError) as exc:
        return DoctorLine("mock upstream", "fail", f"{where}: {exc}", _mock_fix(external))
    if capture.terminal != "done" or not capture.content_events:
        return DoctorLine(
            "mock upstream",
            "fail",
            f"{where}: stream ended {capture.terminal!r} after {capture.content_events} "
            f"content events (HTTP {capture.status})",
            _mock_fix(external),
        )
    return DoctorLine(
        "mock upstream",
        "ok",
        f"{where}: streamed a reply ({capture.content_events} content events) ending in [DONE]",
    )


def _check_engine() -> DoctorLine:
    from labkit.engine import ENGINE_URL_ENV, RECIPE, cache_root, find_engine, missing_tools
    from labkit.engine.serve import ExternalEngine
    from labkit.errors import LabkitError
    from labkit.settings import ENGINE_URL

    try:
        external = ENGINE_URL.read()
    except LabkitError as exc:  # a value that is not a URL
        return DoctorLine("real engine", "fail", str(exc), f"fix or unset {ENGINE_URL_ENV}")
    if external:
        try:
            engine = ExternalEngine(external)
        except LabkitError as exc:
            return DoctorLine(
                "real engine", "fail", f"{ENGINE_URL_ENV}={external}: {exc}",
                f"start that engine, or unset {ENGINE_URL_ENV} to use the lab's own",
            )  # fmt: skip
        return DoctorLine(
            "real engine", "ok", f"{ENGINE_URL_ENV}={external}: serves {engine.model}"
        )
    files = find_engine()
    if files is None:
        missing = missing_tools()
        needs = f" (it needs {', '.join(missing)}, missing here)" if missing else ""
        return DoctorLine(
            "real engine",
            "warn",
            f"not built in {cache_root()}: the notebooks' 'on a real engine' cells skip",
            f"run `make engine` once (minutes){needs}",
        )
    try:
        version = subprocess.run(
            [str(files.binary), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DoctorLine(
            "real engine", "fail", f"{files.binary} does not run: {exc}",
            f"delete {files.binary.parent} and run `make engine` again",
        )  # fmt: skip
    if version.returncode != 0:
        return DoctorLine(
            "real engine", "fail",
            f"{files.binary} --version exited {version.returncode}",
            f"delete {files.binary.parent} and run `make engine` again",
        )  # fmt: skip
    return DoctorLine(
        "real engine",
        "ok",
        f"llama-server {RECIPE.build_tag} at {files.binary}, model {files.model.name}",
    )


def _check_grading_user() -> DoctorLine:
    """The grader's own check (``labkit.grading.environment``): can the user that runs learner
    code start this Python, in the sandbox grading will use, and import what a proxy needs?"""
    from labkit.errors import LabkitError
    from labkit.grading.environment import check_environment

    try:
        checked = check_environment()
    except LabkitError as exc:  # LABKIT_SANDBOX names a sandbox that cannot run here
        return DoctorLine(
            "grading user", "fail", str(exc), "make that sandbox work, or unset LABKIT_SANDBOX"
        )
    if checked.ok:
        return DoctorLine("grading user", "ok", checked.describe())
    found = checked.describe() + (f" (its stderr: {checked.details})" if checked.details else "")
    return DoctorLine(
        "grading user",
        "fail",
        found,
        "nothing can be graded here until that user can: install Python and the virtual "
        "environment outside a folder only its owner may enter (such as /root, or one "
        "`mktemp -d` made), or install bubblewrap, whose sandbox binds them in",
    )


def _mock_fix(external: str | None) -> str:
    if external:
        return "start it (`mock-upstream --port 8001`) or unset LABKIT_UPSTREAM_URL"
    return _REINSTALL


_CHECKS: tuple[Callable[[], DoctorLine | list[DoctorLine]], ...] = (
    _check_python,
    _check_packages,
    _check_kernel,
    _check_bind,
    lambda: _check_program("curl", "the curl examples"),
    lambda: _check_program("nginx", "the nginx notebook"),
    _check_redis_server,
    _check_browser,
    _check_mock_upstream,
    _check_grading_user,
    _check_engine,
)


def run_doctor() -> list[DoctorLine]:
    """Diagnose this machine. Prints nothing; a check that crashes becomes a ``fail`` line."""
    lines: list[DoctorLine] = []
    for check in _CHECKS:
        try:
            result = check()
        except Exception as exc:  # a broken check must not hide the others
            result = DoctorLine(
                getattr(check, "__name__", "check").removeprefix("_check_"),
                "fail",
                f"the check itself crashed: {type(exc).__name__}: {exc}",
                "please report this with the output of `labkit doctor`",
            )
        lines.extend(result if isinstance(result, list) else [result])
    return lines


def format_doctor(lines: Sequence[DoctorLine]) -> str:
    """Render the lines for a terminal, with a last line that sums them up."""
    width = max((len(line.check) for line in lines), default=0)
    out = []
    for line in lines:
        out.append(f"{_MARKS[line.status]} {line.check:<{width}}  {line.found}")
        if line.fix:
            out.append(f"     {'':<{width}}  fix: {line.fix}")
    failing = sum(1 for line in lines if line.status == "fail")
    warning = sum(1 for line in lines if line.status == "warn")
    if failing:
        out.append(f"{failing} thing(s) to fix before starting the lab.")
    elif warning:
        out.append(f"Ready for the lab ({warning} optional thing(s) missing).")
    else:
        out.append("Ready for the lab.")
    return "\n".join(out)


def doctor_exit_code(lines: Sequence[DoctorLine], *, strict: bool = False) -> int:
    """1 if any line must be fixed (with ``strict``, warnings count too), else 0."""
    bad: set[str] = {"fail", "warn"} if strict else {"fail"}
    return 1 if any(line.status in bad for line in lines) else 0
