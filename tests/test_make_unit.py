"""``make unit``'s two passes: each test runs once, and any failure fails the suite, with no
second run to hide a flaky test (tests/workers.py). Run against a stand-in ``pytest`` that
answers each call with a scripted exit code and records its arguments."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.sockets  # it starts make

REPO = Path(__file__).resolve().parent.parent
AGAIN = "--last-failed"  # what the retired re-run passed pytest


def run_unit(tmp_path: Path, exit_codes: list[int]) -> tuple[int, list[str], str]:
    """Run ``make unit`` with a stand-in pytest that exits with each code in turn; return make's
    exit code, each call's arguments, and make's output."""
    codes = tmp_path / "codes"
    codes.write_text("".join(f"{code}\n" for code in exit_codes))
    calls = tmp_path / "calls"
    fake = tmp_path / "pytest"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f"code=$(head -n 1 {codes}); sed -i 1d {codes}\n"
        'exit "${code:-0}"\n'
    )
    fake.chmod(0o755)
    make = shutil.which("make")
    assert make is not None
    done = subprocess.run(
        [make, "--no-print-directory", "-C", str(REPO), "unit", f"BIN={tmp_path}", "STAMP="],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done.returncode, lines, done.stdout + done.stderr


def test_passes_that_pass_run_once_each(tmp_path: Path) -> None:
    code, calls, _ = run_unit(tmp_path, [0, 0])
    assert code == 0
    assert len(calls) == 2
    assert "not heavy" in calls[0] and AGAIN not in calls[0]
    assert "heavy" in calls[1] and "not heavy" not in calls[1]


def test_a_light_failure_fails_the_suite_and_the_heavy_pass_still_runs(tmp_path: Path) -> None:
    code, calls, _ = run_unit(tmp_path, [1, 0])
    assert code != 0  # make exits 2 when a recipe fails
    assert len(calls) == 2
    assert all(AGAIN not in call for call in calls)  # nothing is run a second time
    assert "heavy" in calls[1] and "not heavy" not in calls[1]


def test_a_heavy_failure_fails_the_suite(tmp_path: Path) -> None:
    code, calls, _ = run_unit(tmp_path, [0, 1])
    assert code != 0  # make exits 2 when a recipe fails
    assert len(calls) == 2
    assert AGAIN not in calls[1]


def test_an_interrupted_pass_stops_the_suite_at_once(tmp_path: Path) -> None:
    code, calls, _ = run_unit(tmp_path, [2])
    assert code != 0
    assert len(calls) == 1
