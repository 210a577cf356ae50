"""labkit.chat.browser without a browser: finding Chromium, and saying why none can run."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.chat.browser import (
    CHROMIUM_ENV,
    BrowserUnavailableError,
    ChatBrowser,
    browser_problem,
    find_chromium,
)


def test_a_configured_chromium_that_is_not_there_is_named_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CHROMIUM_ENV, "/nowhere/chromium")
    assert find_chromium() is None
    problem = browser_problem()
    assert problem is not None
    assert problem.startswith(f"{CHROMIUM_ENV}=/nowhere/chromium is not an executable file: ")
    assert "apt-get install chromium" in problem
    with pytest.raises(BrowserUnavailableError, match=r"^Cannot drive a browser: LABKIT_CHROMIUM"):
        ChatBrowser()


def test_without_chromium_on_path_the_reason_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHROMIUM_ENV, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    problem = browser_problem()
    assert problem is not None and "\n" not in problem
    assert problem.startswith("no Chromium found on PATH: install it (Debian/Ubuntu: apt-get")


@pytest.mark.sockets
def test_a_chromium_that_does_not_start_says_so(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(BrowserUnavailableError, match=r"Chromium at .*chromium did not start: "):
        ChatBrowser(str(fake), timeout_s=5.0)
