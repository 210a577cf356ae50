"""The learner bundle's ``make grade`` gives the instructor's grade (Bug, issue 45: it ran
``labkit grade proxy.py`` alone, with the default rubric, and gave a learner 100/100 where the
instructor's ``labkit grade proxy.py --notebooks notebooks`` gave 83/100: the notebook parts were
never graded. Fix: it zips what the learner hands in and runs Gradescope's own command on it,
with the bundle's rubric and planned course).

One partly written hand-in, in a bundle made with a rubric that is not the default: the reference
``proxy.py`` with notebook 05's and 10's parts stubbed as the bundle stubs them, the instructor's
notebooks (answers written) but 08 and 11 as handed out (answers missing) and 13 not handed in.
The bundle's ``make grade`` (run with this checkout's Python and the bundle's own ``labkit``
first on the path, as its ``.venv`` would have it) and the instructor's ``labkit grade proxy.py
--notebooks notebooks --rubric ... --gradescope ... --json`` grade it; both must give the same
score, the same verdict on every check and part, and the same feedback file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from grading_support import REFERENCE

from labkit.cli import main
from labkit.grading.autograder import COURSE, write_gradescope_zip
from labkit.grading.classroom import RUBRIC_FILE
from labkit.grading.notebook_parts import COURSE_FILE
from labkit.grading.rubric import Rubric
from labkit.regions import strip_solutions
from labkit.student import make_bundle, part_owners

ROOT = Path(__file__).resolve().parents[2]
RUBRIC = Rubric.from_mapping(
    {"max_score": 50, "notebook_share": 0.4, "weights": {"trickle": 2, "usage": 3}}
)
STUBBED = {"pass_on", "log_usage", "make_queue"}  # notebooks 05 and 10
AS_HANDED_OUT = ("08_", "11_")  # the learner's copy: the parts' answers missing
NOT_HANDED_IN = "13_"


@pytest.fixture(scope="module")
def handed_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle holding the partly written hand-in, ready for `make grade`."""
    bundle = tmp_path_factory.mktemp("bundle") / "lab"
    make_bundle(ROOT / "notebooks", REFERENCE, bundle, rubric=RUBRIC)
    owners = part_owners(ROOT / "notebooks")
    proxy, _ = strip_solutions(
        REFERENCE.read_text(encoding="utf-8"),
        kind="code",
        only=STUBBED,
        owner=lambda region: owners[region.function],
        importable=True,
    )
    (bundle / "proxy.py").write_text(proxy, encoding="utf-8")
    for learner in sorted((bundle / "notebooks").glob("*.ipynb")):
        if learner.name.startswith(NOT_HANDED_IN):
            learner.unlink()
        elif not learner.name.startswith(AS_HANDED_OUT):
            learner.write_bytes((ROOT / "notebooks" / learner.name).read_bytes())
    (bundle / ".venv").mkdir()
    (bundle / ".venv" / ".installed").touch()  # installed: `make grade` uses BIN below
    return bundle


def _compared(results: dict[str, Any]) -> dict[str, Any]:
    """What two gradings of one hand-in must share: every test's name, status, points and,
    for a failed one, its verdict; the score; the feedback with measured numbers and the
    grading's temporary folders blanked."""
    feedback = re.sub(r"/\S*labkit-\S+", "TMP", results["output"])
    return {
        "score": results["score"],
        "tests": [
            (t["name"], t["status"], t["score"], t["max_score"])
            + ((t["output"].splitlines()[0],) if t["status"] == "failed" else ())
            for t in results["tests"]
        ],
        "feedback": re.sub(r"\d+(\.\d+)?", "N", feedback),
    }


def test_the_bundle_carries_the_autograders_course_and_rubric(
    handed_in: Path, tmp_path: Path
) -> None:
    autograder = tmp_path / "autograder.zip"
    write_gradescope_zip(autograder, RUBRIC)
    with zipfile.ZipFile(autograder) as archive:
        course, rubric = archive.read(COURSE), archive.read("rubric.toml")
    assert (handed_in / "labkit" / "bundle_files" / COURSE_FILE).read_bytes() == course
    assert (handed_in / RUBRIC_FILE).read_bytes() == rubric
    makefile = (handed_in / "Makefile").read_text()
    assert "-m labkit.grading.gradescope --root $(GRADED) --rubric $(RUBRIC)" in makefile
    assert f"RUBRIC := {RUBRIC_FILE}" in makefile


@pytest.mark.slow
@pytest.mark.sockets
@pytest.mark.timeout(600)  # two gradings of proxy.py and the notebook parts: 40 s each here
def test_make_grade_gives_the_instructors_score_verdicts_and_feedback(
    handed_in: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": str(handed_in)}  # the bundle's labkit, as its venv has it
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        ["make", "grade", f"BIN={Path(sys.executable).parent}"],
        cwd=handed_in,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 2, done.stdout + done.stderr  # make's status: a test failed
    learner = json.loads((handed_in / "autograder" / "results" / "results.json").read_text())
    assert (handed_in / "autograder" / "feedback.md").read_text() == learner["output"]

    rubric = tmp_path / "rubric.toml"
    rubric.write_text(RUBRIC.to_toml())
    target = tmp_path / "results.json"
    code = main(
        [
            "grade",
            str(handed_in / "proxy.py"),
            "--notebooks",
            str(handed_in / "notebooks"),
            "--rubric",
            str(rubric),
            "--gradescope",
            str(target),
            "--json",
        ]
    )
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    instructor = json.loads(target.read_text())

    assert _compared(learner) == _compared(instructor)
    verdicts = {t["name"].split(":")[0]: t["status"] for t in learner["tests"]}
    assert verdicts == {i: check["status"] for i, check in report["checks"].items()}
    assert round(sum(t["max_score"] for t in learner["tests"]), 2) == RUBRIC.max_score
    failed = {i for i, status in verdicts.items() if status == "failed"}
    assert {"usage", "backpressure", "nb08.adapter", "nb11.metrics", "nb13.location"} <= failed
    assert "trickle" not in failed and "nb09.scanner" not in failed
    # 05's pass_on cell is graded as handed in, whatever proxy.py holds (its pass_on is stubbed)
    assert "nb05.pass_on" not in failed and "nb07.next_item" not in failed
    # what make grade printed: the results' score and each test's line
    assert f"Score: {learner['score']:g}/50 (" in done.stdout
    for test in learner["tests"]:
        assert test["name"] in done.stdout
