"""A notebook cell that fails nbval by writing to stderr shows what it wrote.

nbval reports only "Unexpected output fields from running code: {'stderr'}" when a cell prints
to stderr and its committed outputs do not; ``notebooks/conftest.py`` adds the text to the
failure, so the next time it happens in CI the cause can be read (docs/known-limits.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.sockets  # a kernel
def test_a_cell_that_writes_to_stderr_unexpectedly_shows_the_text(tmp_path: Path) -> None:
    quiet = nbformat.v4.new_code_cell("x = 1")
    noisy = nbformat.v4.new_code_cell(
        "import sys\nprint('PASS')\nprint('a warning from a background thread', file=sys.stderr)",
        execution_count=2,
        outputs=[nbformat.v4.new_output("stream", name="stdout", text="PASS\n")],
    )  # as committed: the verdict, and nothing on stderr
    notebook = nbformat.v4.new_notebook(cells=[quiet, noisy])
    nbformat.write(notebook, tmp_path / "noisy.ipynb")
    shutil.copy(ROOT / "notebooks" / "conftest.py", tmp_path / "conftest.py")

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval",
            "--nbval-current-env",
            "-p",
            "no:cacheprovider",
            "noisy.ipynb",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "Unexpected output fields" in done.stdout
    assert "what the cell wrote to stderr" in done.stdout
    assert "a warning from a background thread" in done.stdout
