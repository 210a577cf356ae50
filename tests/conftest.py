"""Make ``solutions`` (the instructor's proxies, not installed) importable in child processes.

pytest puts the repository root on its own ``sys.path`` (``pythonpath`` in pyproject.toml);
the proxies the tests start in child processes, and the grader's worker, find it through
``PYTHONPATH``, which the grader's stripped environment keeps.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)
