"""A Python that another user (``NOBODY``) can start, with this checkout's labkit importable:
what a test needs to run a child as a user without root.

A fresh clone need not allow it: a clone in a folder only its owner may enter (as ``mktemp -d``
makes), or a venv whose Python lies under ``/root``, is closed to that user (issue 46). Worse,
``setpriv`` starts the interpreter while it still holds root's rights, so it may start one the
user cannot read, which then loads the system's libpython and standard library: a Python
other than the one the test meant, and no error.

``find_another_user`` tries this venv's Python, then the system's, each run as that user and
kept only where it imports labkit and is the same Python it is for root. labkit is this
checkout's where that user can read it, else a copy in a folder it can. None works: the reason,
for the test to skip with.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.grading.isolation import NOBODY

ROOT = Path(__file__).resolve().parents[2]
DROP = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
# what the tests' children import (labkit's grading network, confinement and zygote: the
# standard library and labkit alone), then which Python ran
PROBE = "import sys, labkit.grading.zygote; print(sys.version)"
VERSION = "import sys; print(sys.version)"


@dataclass(frozen=True)
class AnotherUser:
    """How a test runs Python as ``NOBODY``: ``python``, with ``path`` (the folder that holds
    the labkit it imports) as its ``PYTHONPATH``."""

    python: str
    path: str

    def command(self, *args: str) -> list[str]:
        return [*DROP, self.python, *args]

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "PYTHONPATH": self.path, "PYTHONDONTWRITEBYTECODE": "1"}


def _candidates() -> list[str]:
    found = [sys.executable, os.path.realpath(sys.executable)]
    found += [p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    return list(dict.fromkeys(found))


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd="/", timeout=60, check=False
    )


def _why_not(user: AnotherUser) -> str:
    """'' if ``user`` starts its Python, imports labkit and is the Python root gets."""
    as_root = _run([user.python, "-c", VERSION], user.env())
    shown = _run(user.command("-c", PROBE), user.env())
    if shown.returncode != 0:
        last = (shown.stderr.strip().splitlines() or [f"exit status {shown.returncode}"])[-1]
        return f"{user.python} with {user.path}: {last}"
    if shown.stdout != as_root.stdout:
        return (
            f"{user.python} is Python {as_root.stdout.split()[0]} for root but "
            f"{shown.stdout.split()[0]} for uid {NOBODY}, who cannot read its own files"
        )
    return ""


def _readable_copy(scratch: Path) -> str:
    """This checkout's labkit, copied into ``scratch`` for anyone to read; that folder."""
    target = scratch / "labkit"
    if not target.exists():
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "labkit", target, ignore=ignore)
        for folder, _, files in os.walk(scratch):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
    return str(scratch)


def find_another_user(scratch: Path) -> AnotherUser | str:
    """A Python ``NOBODY`` can start with labkit, or why there is none (root and ``setpriv``
    needed). ``scratch``: an empty folder for a copy of labkit, if one is needed."""
    if os.geteuid() != 0:
        return "needs root to run a child as another user"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux) to run a child as another user"
    scratch.chmod(0o755)
    tried = []
    for python in _candidates():
        for path in (str(ROOT), None):
            user = AnotherUser(python, path or _readable_copy(scratch))
            why = _why_not(user)
            if not why:
                return user
            tried.append(why)
    return f"no Python that uid {NOBODY} can start with labkit here: " + "; ".join(tried)
