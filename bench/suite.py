"""Wall time of the project's own slow things, so slow-downs are seen (only with ``--suite``).

Each part is one command run from the repository root with its output discarded; the record is
the wall time, the exit code and the load average around it (a busy machine makes everything
slower, so the load goes in the record, not in a footnote).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TIMEOUT_S: Final = 1800.0


def commands() -> dict[str, list[str]]:
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    return {
        "unit": [str(BIN / "pytest"), "tests", "-q", "-p", "no:cacheprovider"],
        "nbval": [
            str(BIN / "pytest"),
            "--nbval",
            "--nbval-current-env",
            "--nbval-sanitize-with",
            "notebooks/sanitize.cfg",
            "-p",
            "no:cacheprovider",
            "-q",
            *notebooks,
        ],
        "grade": [str(BIN / "labkit"), "grade", "solutions/proxy.py"],
        "make-test": ["make", "test"],
    }


PARTS: Final = tuple(commands())


def time_part(name: str) -> dict[str, Any]:
    """Run one part; never raises for a failing or hanging command (the record says so)."""
    argv = commands()[name]
    load_before = os.getloadavg()[0]
    began = time.monotonic()
    try:
        completed = subprocess.run(
            argv,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TIMEOUT_S,
            check=False,
        )
        code: int | None = completed.returncode
    except subprocess.TimeoutExpired:
        code = None
    return {
        "part": name,
        "command": " ".join(argv),
        "wall_s": round(time.monotonic() - began, 2),
        "exit_code": code,
        "timed_out": code is None,
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
    }
