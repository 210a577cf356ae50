"""labkit doctor: structured lines, a readable rendering, and the exit-code rule."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from labkit import doctor
from labkit.chat.browser import CHROMIUM_ENV
from labkit.doctor import DoctorLine, doctor_exit_code, format_doctor, run_doctor


@pytest.mark.sockets
def test_doctor_on_this_machine_checks_everything_and_reaches_the_mock() -> None:
    lines = run_doctor()
    by_check = {line.check: line for line in lines}
    for check in (
        "python",
        "kernel",
        "localhost ports",
        "curl",
        "nginx",
        "redis-server",
        "browser",
        "mock upstream",
        "grading user",
    ):
        assert check in by_check
    assert "package uvicorn" in by_check and "package httpx" in by_check
    assert not any(name.startswith("package pytest") for name in by_check)  # dev extra
    assert by_check["mock upstream"].status == "ok", by_check["mock upstream"]
    assert by_check["localhost ports"].status == "ok"
    assert by_check["python"].status == "ok"
    assert by_check["grading user"].status == "ok", by_check["grading user"]
    assert all(line.fix for line in lines if not line.ok)


def test_a_missing_program_is_a_warning_with_install_instructions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(doctor, "_find_program", lambda name: None)
    line = doctor._check_program("nginx", "the nginx notebook")
    assert line == DoctorLine(
        "nginx",
        "warn",
        "not found (only needed for the nginx notebook)",
        "`apt-get install nginx` (Debian/Ubuntu), `brew install nginx` (macOS) "
        "or `conda install -c conda-forge nginx`",
    )


def test_a_missing_redis_server_names_homebrews_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_find_program", lambda name: None)
    assert doctor._check_redis_server() == DoctorLine(
        "redis-server",
        "warn",
        "not found (only needed for notebook 15 and the resumable-stream tests)",
        "`apt-get install redis-server` (Debian/Ubuntu), `brew install redis` (macOS) "
        "or `conda install -c conda-forge redis-server`",
    )


def test_a_crashing_check_becomes_a_fail_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def _check_broken() -> DoctorLine:
        raise OSError("no /proc")

    monkeypatch.setattr(doctor, "_CHECKS", (_check_broken,))
    (line,) = run_doctor()
    assert line.check == "broken"
    assert line.status == "fail"
    assert line.found == "the check itself crashed: OSError: no /proc"


def test_format_and_exit_code() -> None:
    lines = [
        DoctorLine("python", "ok", "Python 3.11.7"),
        DoctorLine("nginx", "warn", "not found", "apt-get install nginx"),
    ]
    assert format_doctor(lines) == (
        "OK   python  Python 3.11.7\n"
        "WARN nginx   not found\n"
        "             fix: apt-get install nginx\n"
        "Ready for the lab (1 optional thing(s) missing)."
    )
    assert doctor_exit_code(lines) == 0
    assert doctor_exit_code(lines, strict=True) == 1
    failing = [*lines, DoctorLine("kernel", "fail", "no 'python3' kernel", "install it")]
    assert doctor_exit_code(failing) == 1
    assert format_doctor(failing).endswith("1 thing(s) to fix before starting the lab.")


def _fake_chromium(tmp_path: Path, script: str) -> str:
    path = tmp_path / "chromium"
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.sockets
def test_the_browser_line_names_the_chromium_it_found_and_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chromium = _fake_chromium(
        tmp_path, 'echo "warning on stderr" >&2; echo "Chromium 156.0.1 test"'
    )
    monkeypatch.setenv(CHROMIUM_ENV, chromium)
    line = doctor._check_browser()
    version = importlib.metadata.version("playwright")
    assert line == DoctorLine(
        "browser", "ok", f"playwright {version}, Chromium 156.0.1 test at {chromium}"
    )


def test_no_chromium_is_a_warning_that_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHROMIUM_ENV, str(tmp_path / "absent"))
    line = doctor._check_browser()
    assert line.status == "warn"
    assert f"{CHROMIUM_ENV}={tmp_path / 'absent'} is not an executable file" in line.found
    assert "notebook 14" in line.found
    assert line.fix is not None and "apt-get install chromium" in line.fix


@pytest.mark.sockets
def test_a_chromium_that_does_not_run_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chromium = _fake_chromium(tmp_path, "exit 3")
    monkeypatch.setenv(CHROMIUM_ENV, chromium)
    line = doctor._check_browser()
    assert line.status == "warn" and f"{chromium} does not run" in line.found
    assert line.fix is not None and "--reinstall chromium" in line.fix


def test_no_playwright_is_a_warning_with_the_pinned_pip_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # import now fails
    line = doctor._check_browser()
    assert line.status == "warn"
    assert line.found == (
        "the playwright package is not installed (only needed for notebook 14's browser cells)"
    )
    assert line.fix is not None and "pip install 'playwright<1.64,>=1.63'" in line.fix


@pytest.mark.parametrize(
    ("variable", "check", "line"),
    [
        ("LABKIT_UPSTREAM_URL", doctor._check_mock_upstream, "mock upstream"),
        ("LABKIT_ENGINE_URL", doctor._check_engine, "real engine"),
    ],
)
def test_a_url_setting_that_is_not_a_url_is_a_failed_line_that_names_it(
    variable: str,
    check: Callable[[], DoctorLine],
    line: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The doctor reports a bad setting in labkit.settings' words instead of stopping."""
    monkeypatch.setenv(variable, "127.0.0.1:8001")
    found = check()
    assert isinstance(found, DoctorLine)
    assert (found.check, found.status) == (line, "fail")
    assert found.found.startswith(f"{variable}='127.0.0.1:8001', but it must be an http:// or ")
    assert found.fix == f"fix or unset {variable}"
