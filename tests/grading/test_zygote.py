"""The class's zygote (``labkit.grading.zygote``): it forks a confined runner per request,
reports how each ended, and kills one when asked, when its worker goes away, or when the zygote
itself is stopped; everything a runner started dies with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from another_user import AnotherUser

from labkit.grading.confine import Sandbox
from labkit.grading.isolation import NOBODY, readonly_paths
from labkit.grading.sandbox import clean_env
from labkit.grading.zygote import Spawned, Zygote, ZygoteClient

pytestmark = [
    pytest.mark.sockets,  # forks, and confines the child with namespaces and mounts
    pytest.mark.skipif(
        os.geteuid() != 0 or not sys.platform.startswith("linux"),
        reason="a zygote's runners are confined only as root, on Linux",
    ),
]

SLEEPER = "sleep 926"
PROMPT_S = 10.0  # a kill is answered in well under a second; this only bounds a broken one


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    started = Zygote.start([], clean_env(tmp_path), 60)
    assert isinstance(started, Zygote), f"root here, yet no zygote: {started}"
    yield started
    started.stop()


def _spawn(zygote: Zygote, work: Path, cells: list[list[str]]) -> Spawned:
    """A runner for one notebook of ``cells``, in ``work`` (its only writable folder)."""
    work.mkdir()
    plan = work / "runs.json"
    plan.write_text(json.dumps({"runners": 1, "runs": [{"notebook": "nb", "cells": cells}]}))
    os.chown(work, NOBODY, NOBODY)
    sandbox = Sandbox(
        readonly=tuple(readonly_paths([work])),
        writable=(str(work),),
        uid=NOBODY,
        env=clean_env(work),
        cwd=str(work),
    )
    return ZygoteClient(zygote.path).spawn([str(plan), str(work / "events")], sandbox)


def _started(work: Path) -> None:
    """Wait until the runner's cell has started its sleeper."""
    deadline = time.monotonic() + 60
    while not (work / "started").exists():
        assert time.monotonic() < deadline, "the runner's cell never started"
        time.sleep(0.05)


def _sleepers() -> str:
    return subprocess.run(["pgrep", "-f", SLEEPER], capture_output=True, text=True).stdout


HANGING = [
    [
        "setup",
        "import subprocess, time, pathlib\n"
        f"subprocess.Popen({SLEEPER.split()!r}, start_new_session=True)\n"
        "pathlib.Path('started').write_text('yes')\n"
        "time.sleep(600)\n",
    ]
]


def test_a_runner_that_ends_reports_its_status_and_ran_its_cells(
    zygote: Zygote, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    cell = "import os, pathlib\npathlib.Path('ran').write_text(str(os.getuid()))\n"
    runner = _spawn(zygote, work, [["setup", cell]])
    assert runner.wait() == 0
    assert (work / "ran").read_text() == str(NOBODY)
    lines = (work / "events-0.jsonl").read_text().splitlines()
    events = [json.loads(line)["event"] for line in lines]
    assert events == ["start", "done"]


def test_a_killed_runner_ends_at_once_with_everything_it_started(
    zygote: Zygote, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    runner = _spawn(zygote, work, HANGING)
    _started(work)
    assert runner.poll() is None
    runner.kill()
    started = time.monotonic()
    assert runner.wait() != 0
    assert time.monotonic() - started < PROMPT_S
    # Its children die by the parent-death signal, which the kernel delivers after the runner
    # is reaped: soon, not at once (one look right after wait() once saw the sleeper still up).
    deadline = time.monotonic() + PROMPT_S
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleepers() == "", "a process the runner started outlived it"


def test_a_runner_whose_worker_goes_away_is_killed(zygote: Zygote, tmp_path: Path) -> None:
    work = tmp_path / "work"
    runner = _spawn(zygote, work, HANGING)
    _started(work)
    runner._conn.close()  # the worker died without a word
    deadline = time.monotonic() + PROMPT_S
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleepers() == "", "the runner of a worker that went away kept running"


def test_stopping_the_zygote_kills_its_runners(tmp_path: Path) -> None:
    started = Zygote.start([], clean_env(tmp_path), 60)
    assert isinstance(started, Zygote), started
    work = tmp_path / "work"
    runner = _spawn(started, work, HANGING)
    _started(work)
    started.stop()
    assert runner.wait() != 0
    assert _sleepers() == ""
    assert not started.home.exists(), "the zygote's folder (its socket) was left behind"


def test_the_zygote_socket_is_roots_alone(zygote: Zygote) -> None:
    mode = os.stat(zygote.path).st_mode & 0o777
    folder = os.stat(zygote.home).st_mode & 0o777
    assert (mode, folder) == (0o600, 0o700)


def test_a_zygote_started_without_root_says_why_and_ends(another_user: AnotherUser) -> None:
    """Bug: run with this venv's Python, which that user may not be able to start (a clone in
    a folder only root may enter), the zygote died before it said why. Fix: a Python that user
    can start, with labkit (the ``another_user`` fixture)."""
    home = Path(tempfile.mkdtemp())  # not below pytest's own folder, which is root's alone
    try:
        home.chmod(0o777)
        shown = subprocess.run(
            another_user.command("-m", "labkit.grading.zygote", str(home / "zygote.sock")),
            capture_output=True,
            text=True,
            env=another_user.env(),
            timeout=60,
            check=True,
        )
    finally:
        shutil.rmtree(home)
    assert "needs root" in json.loads(shown.stdout)["unavailable"]
