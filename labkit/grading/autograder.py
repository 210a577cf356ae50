"""The Gradescope autograder zip: ``labkit autograder gradescope --out autograder.zip``.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` there once to build
the image, and then, for each submission, ``run_autograder`` (copied to ``/autograder``). The
zip holds::

    setup.sh          uv from PyPI, a released CPython 3.11 that uv manages (never Ubuntu
                      22.04's own python3.11, a release candidate), bubblewrap where allowed,
                      and the grader in /autograder/venv
    run_autograder    python -m labkit.grading.gradescope; a results.json whatever happens
    rubric.toml       the instructor's weights and limits (the defaults when none is given)
    requirements.txt  the grader's lock (``GRADER_LOCK``: no JupyterLab, kernel or aiohttp)
    grader/           pyproject.toml with the lab's pins, labkit/ and mock_upstream/, and in
                      labkit/bundle_files/course.json the in-notebook parts' graded cells
                      (``notebook_parts.write_course``: solutions stubbed), which
                      run_autograder grades the learner's notebooks/ with

No solution is in it: the grader needs none. Set the assignment's points in Gradescope to the
rubric's ``max_score``: the tests add up to it exactly (``labkit.grading.gradescope``).
"""

from __future__ import annotations

import os
import stat
import tempfile
import zipfile
from pathlib import Path

from labkit.grading.notebook_grader import course_dir
from labkit.grading.notebook_parts import COURSE_FILE, write_course
from labkit.grading.rubric import Rubric
from labkit.packaging import TEMPLATES, copy_packages, pyproject, render

__all__ = ["COURSE", "ENTRYPOINTS", "GRADER_LOCK", "write_gradescope_zip"]

# `make lock` resolves it from requirements/grader.in within requirements/dev.txt's versions
GRADER_LOCK = TEMPLATES / "grader-requirements.txt"

ENTRYPOINTS = ("setup.sh", "run_autograder")
#: The planned course in the zip (and in the grader it installs): what grades the notebook parts.
COURSE = f"grader/labkit/bundle_files/{COURSE_FILE}"
EXECUTABLE = 0o755


def _add(archive: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def write_gradescope_zip(
    out: Path, rubric: Rubric | None = None, course: Path | None = None
) -> list[str]:
    """Write the autograder zip to ``out``; returns the names in it, in order. The in-notebook
    parts are planned from the instructor's notebooks in ``course`` (default: this checkout's,
    ``notebook_grader.course_dir()``) into ``COURSE``, solutions stubbed."""
    rubric = rubric or Rubric()
    files: dict[str, tuple[bytes, int]] = {
        "setup.sh": (render("gradescope_setup.sh").encode(), EXECUTABLE),
        "run_autograder": (render("gradescope_run_autograder").encode(), EXECUTABLE),
        "rubric.toml": (rubric.to_toml().encode(), 0o644),
        "requirements.txt": (GRADER_LOCK.read_bytes(), 0o644),
        "grader/pyproject.toml": (
            pyproject(
                "streaming-proxy-lab-grader",
                "The Streaming Proxy Lab's grader, as a Gradescope autograder.",
            ).encode(),
            0o644,
        ),
    }
    with tempfile.TemporaryDirectory(prefix="labkit-autograder-") as scratch:
        copy_packages(Path(scratch))
        write_course(course or course_dir(), Path(scratch) / "labkit" / "bundle_files")
        for path in sorted(Path(scratch).rglob("*")):
            if path.is_file():
                name = "grader/" + path.relative_to(scratch).as_posix()
                files[name] = (path.read_bytes(), 0o644)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for name, (data, mode) in files.items():
            _add(archive, name, data, mode)
    os.replace(partial, out)
    return list(files)
