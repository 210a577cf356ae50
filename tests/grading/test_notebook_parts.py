"""The in-notebook parts, graded by the checks their notebooks run: what runs, what it scores,
and that a learner's notebook code is contained like a learner's proxy.

The sandboxed runs take the instructor's notebooks as the course and a learner folder made
here: the instructor's own notebooks (every part passes), ``labkit student`` copies (every part
"not written yet", naming its notebook), one part made wrong (exactly that part fails), and a
part cell that tries what the hostile proxies try. Notebooks 05 and 07's parts are
``%%proxy_part`` cells: their stand-ins are "not written yet" too, and a ``next_item`` that loses
the item after a heartbeat fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import nbformat
import pytest
from folder_reports import PATTERN, REPORTER

import labkit.checks
from labkit.checks import CHECK_IDS
from labkit.grading import roster
from labkit.grading.isolation import choose
from labkit.grading.notebook_grader import (
    CLASS_RUNNERS,
    NOTEBOOK_LIMITS,
    RUNNERS,
    UPLOAD_HINT,
    _Progress,
    _run_once,
    grade_notebook_parts,
)
from labkit.grading.notebook_parts import (
    COURSE_FILE,
    CourseNotebook,
    NotebookRun,
    course_notebooks,
    learner_run,
    notebook_cells,
    proxy_scaffold,
    read_course,
    scaffold_file,
    without_unread,
    write_course,
)
from labkit.grading.report import Problem, SubmissionReport, feedback_markdown
from labkit.grading.roster import Submission, _failed, find_submissions, grade_in_worker
from labkit.grading.rubric import Rubric, RubricError
from labkit.grading.sandbox import clean_env
from labkit.grading.zygote import Zygote
from labkit.regions import PART_MAGIC, part_cell_body
from labkit.student import make_student_copies, stub_proxy

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "proxy.py"
PARTS = {
    "01_baseline_streaming": ["timing_client"],
    "03_gzip_buffering": ["compress_and_flush", "should_compress"],
    "05_usage_capture": ["pass_on"],
    "07_heartbeats_and_timeouts": ["next_item"],
    "08_providers_and_normalisation": ["adapter", "cache_and_stops", "refusal", "responses"],
    "09_tool_calls_and_partial_json": [
        "accumulate",
        "scanner",
        "validate",
        "blocks",
        "transcript",
    ],
    "11_metrics_billing_and_retries": ["metrics", "billing", "retries", "no_answer"],
    "12_client_states_and_release": ["states", "release", "gateway", "by_sentence"],
    "13_nginx_and_the_edge": ["location"],
    "14_browser_chat": ["predict"],
}
PART_IDS = [f"nb{notebook[:2]}.{check}" for notebook, checks in PARTS.items() for check in checks]


@pytest.fixture(scope="module")
def course() -> list[CourseNotebook]:
    return course_notebooks(ROOT / "notebooks")


def _only(course: list[CourseNotebook], *numbers: str) -> list[CourseNotebook]:
    return [nb for nb in course if nb.stem[:2] in numbers]


def _learner(tmp_path: Path, notebooks: Path | None = None) -> Path:
    """A learner folder holding the instructor's notebooks (or ``notebooks``') and proxy.py."""
    folder = tmp_path / "learner"
    shutil.copytree(notebooks or ROOT / "notebooks", folder / "notebooks")
    shutil.copyfile(REFERENCE, folder / "proxy.py")
    return folder


def _edit_cell(path: Path, defines: str, edit: str, new: str) -> None:
    """Replace ``edit`` with ``new`` in the cell of notebook ``path`` that defines ``defines``."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and defines in c.source)
    assert edit in cell.source
    cell.source = cell.source.replace(edit, new)
    nbformat.write(nb, path)


# --- what runs (no process started) ----------------------------------------------------------


def test_the_graded_parts_are_the_checks_that_judge_an_in_notebook_part(
    course: list[CourseNotebook],
) -> None:
    found = {nb.stem: [p.check for p in nb.parts] for nb in course}
    assert found == PARTS
    # notebook 13's trickle and heartbeats judge proxy.py only, which labkit grade grades
    location = _only(course, "13")[0].parts
    assert [(p.id, p.judges) for p in location] == [("nb13.location", ("streaming_location",))]
    assert not set(CHECK_IDS) & {p.id for nb in course for p in nb.parts}


def test_a_proxy_part_cell_no_check_names_is_graded_with_proxy_py_alone(
    course: list[CourseNotebook],
) -> None:
    """03's ``sse_events``, 05's ``ask_for_usage``, 07's ``upstream_timeout`` and 10's
    ``make_queue`` are ``%%proxy_part`` cells no check cell names: parts of proxy.py, which
    ``labkit grade`` grades, not run here."""
    for nb in _only(course, "03", "10"):
        assert not any(cell.writes_proxy for cell in nb.cells), nb.stem
        assert not nb.scaffold
    for nb, others in [
        (_only(course, "05")[0], "ask_for_usage"),
        (_only(course, "07")[0], "upstream_timeout"),
    ]:
        assert not any(others in cell.owners for cell in nb.cells), nb.stem
    assert not _only(course, "10")  # make_queue is its only part: no row of its own


def test_a_proxy_part_cell_a_check_names_runs_in_proxy_py_as_handed_out(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    """05's ``pass_on`` and 07's ``next_item``: the learner's cell, magic line and all, writes
    into a private copy of the bundle's proxy.py (the reference stubbed as ``labkit student``
    stubs it), never the solution; the same in a packaged grader's course.json."""
    bundled, _ = stub_proxy(REFERENCE.read_text(encoding="utf-8"), ROOT / "notebooks")
    assert proxy_scaffold(ROOT / "notebooks") == bundled
    make_student_copies(ROOT / "notebooks", tmp_path / "copies")
    for number, name in [("05", "pass_on"), ("07", "next_item")]:
        nb = _only(course, number)[0]
        assert [(p.id, p.judges) for p in nb.parts] == [(f"nb{number}.{name}", (name,))]
        [planned] = [cell for cell in nb.cells if cell.writes_proxy]
        assert planned.owners == (name,)
        assert planned.source.startswith(f"{PART_MAGIC} {scaffold_file(nb.stem)}\n")
        assert "BEGIN SOLUTION" not in planned.source + nb.scaffold
        assert f"# YOUR CODE HERE: {name}, notebook {nb.stem}. Until then" in planned.source
        path = tmp_path / "copies" / f"{nb.stem}.ipynb"
        learner = [
            replace(c, source=c.source.replace("Until then", "LEARNER_MARK"))
            for c in notebook_cells(path.read_bytes(), path.name)
        ]
        run = learner_run(nb, learner)
        [part] = [source for role, source in run.cells if role == "part"]
        assert part.startswith(f"{PART_MAGIC} {scaffold_file(nb.stem)}\n")
        assert "LEARNER_MARK" in (part_cell_body(part) or "")
        assert run.files == ((scaffold_file(nb.stem), bundled),) and run.taken == (name,)
    planned_course = write_course(ROOT / "notebooks", tmp_path / "packaged")
    assert read_course(tmp_path / "packaged" / COURSE_FILE) == planned_course


def test_a_learner_run_takes_the_part_cells_from_the_learner_and_the_rest_from_the_course(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    make_student_copies(ROOT / "notebooks", tmp_path)
    nb12 = _only(course, "12")[0]
    learner = notebook_cells((tmp_path / f"{nb12.stem}.ipynb").read_bytes(), nb12.stem)
    learner = [
        replace(c, source=c.source + "\n\nLEARNER_MARK = 1\n")
        if "def next_state" in c.source
        else c
        for c in learner
    ]
    run = learner_run(nb12, learner)
    roles = [role for role, _ in run.cells]
    assert roles.count("part") == 3 and roles.count("check") == 2
    sources = "\n".join(source for _, source in run.cells)
    assert "LEARNER_MARK = 1" in sources
    assert "BEGIN SOLUTION" not in sources  # no solution reaches the sandbox
    # the experiments are left out: section 1's proxy, the six fates of section 2
    assert 'start_proxy("proxy")' not in sources and "fates = six_fates" not in sources
    assert "def six_fates" in sources and 'ANSWERS = "/v1/answers"' in sources


def test_a_setup_cells_imports_and_helpers_no_cell_reads_are_left_out() -> None:
    """An import costs up to a second and a half of CPU per learner (anthropic, jsonschema,
    matplotlib): what no kept cell reads is not run; what any cell reads is."""
    setup = (
        "import json\n"
        "import matplotlib.pyplot as plt\n"
        "from openai import OpenAI\n"
        "from labkit import *\n"
        "def draw(xs):\n    plt.plot(xs)\n"
        "def parse(text):\n    return json.loads(text)\n"
        "@register\ndef hook():\n    pass\n"
        "class Unused:\n    pass\n"
    )
    part = "def part(text):\n    return parse(text)\n"
    check = "checks.check('part', 'parses', lambda: part('1') == 1, needs=(part,))\n"
    [(_, kept), _, _] = without_unread([("setup", setup), ("part", part), ("check", check)])
    lines = [line for line in kept.split("\n") if line]
    assert "import json" in lines and "def parse(text):" in lines  # read by the part
    assert "from labkit import *" in lines and "def hook():" in lines  # kept: * and a decorator
    for gone in ("import matplotlib.pyplot as plt", "from openai import OpenAI", "def draw(xs):"):
        assert gone not in lines, gone
    assert "class Unused:" not in lines
    assert len(kept.split("\n")) == len(setup.split("\n"))  # line numbers kept for tracebacks


def test_a_part_the_learner_deleted_runs_as_its_stub(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    nb13 = _only(course, "13")[0]
    path = ROOT / "notebooks" / f"{nb13.stem}.ipynb"
    learner = notebook_cells(path.read_bytes(), path.name)
    run = learner_run(nb13, [c for c in learner if "def streaming_location" not in c.source])
    part = next(source for role, source in run.cells if role == "part")
    assert "Write this part yourself: streaming_location, in notebook 13_nginx" in part
    assert run.taken == ()


def test_the_notebook_parts_share_a_quarter_by_default_and_the_instructors_share_when_set() -> None:
    ids = ["trickle", "cancel", "nb08.adapter", "nb09.scanner"]
    points = Rubric().points(ids)
    assert points == {"trickle": 37.5, "cancel": 37.5, "nb08.adapter": 12.5, "nb09.scanner": 12.5}
    text = 'notebook_share = 0.4\n[notebook_weights]\nnb08.adapter = 3\n"nb09.scanner" = 1\n'
    rubric = Rubric.from_mapping(tomllib.loads(text))
    assert rubric.points(ids) == {
        "trickle": 30.0,
        "cancel": 30.0,
        "nb08.adapter": 30.0,
        "nb09.scanner": 10.0,
    }
    assert Rubric().points(["trickle", "cancel"]) == {"trickle": 50.0, "cancel": 50.0}
    assert Rubric.from_mapping(tomllib.loads(rubric.to_toml())).notebook_weights == {
        "nb08.adapter": 3.0,
        "nb09.scanner": 1.0,
    }


def test_a_rubric_naming_an_unknown_part_says_what_a_part_id_looks_like() -> None:
    with pytest.raises(RubricError, match=r"unknown part 'adapter'.*like nb08.adapter"):
        Rubric.from_mapping({"notebook_weights": {"adapter": 2}})
    with pytest.raises(RubricError, match="notebook_share = 2 is not valid"):
        Rubric.from_mapping({"notebook_share": 2})


def test_a_roster_entry_with_notebooks_grades_every_learners_parts(tmp_path: Path) -> None:
    roster = tmp_path / "roster"
    (roster / "ada" / "notebooks").mkdir(parents=True)
    shutil.copyfile(REFERENCE, roster / "ada" / "proxy.py")
    (roster / "ada" / "notebooks" / "08_providers_and_normalisation.ipynb").write_text("{}")
    shutil.copyfile(REFERENCE, roster / "bob.py")
    with zipfile.ZipFile(roster / "cy.zip", "w") as archive:
        archive.write(REFERENCE, "lab/proxy.py")
        archive.writestr("lab/notebooks/09_tool_calls_and_partial_json.ipynb", "{}")
        archive.writestr("lab/notebooks/notes.txt", "not read")
    found = {s.learner: s for s in find_submissions([roster])}
    assert {name: s.parts for name, s in found.items()} == {"ada": True, "bob": True, "cy": True}
    assert found["bob"].notebooks is None
    assert found["ada"].notebooks == roster / "ada" / "notebooks"
    unzipped = found["cy"].notebooks
    assert unzipped is not None
    assert [p.name for p in unzipped.iterdir()] == ["09_tool_calls_and_partial_json.ipynb"]


def test_a_roster_of_proxy_files_alone_grades_no_notebook_parts(tmp_path: Path) -> None:
    shutil.copyfile(REFERENCE, tmp_path / "bob.py")
    assert [s.parts for s in find_submissions([tmp_path])] == [False]


def test_a_grading_stopped_by_its_time_limit_still_lists_every_part() -> None:
    stopped = Problem("submission_timeout", "grading did not finish within 400 s")
    with_parts = Submission("ada", REFERENCE, None, parts=True)
    report = _failed(with_parts, Rubric(), ["trickle"], stopped, 400.0)
    assert [r.id for r in report.results] == ["trickle", *PART_IDS]
    assert report.score == 0 and report.max_score == 100
    alone = _failed(Submission("bob", REFERENCE), Rubric(), ["trickle"], stopped, 400.0)
    assert [r.id for r in alone.results] == ["trickle"]


def test_lines_in_the_verdicts_file_not_shaped_as_a_verdict_are_not_read(tmp_path: Path) -> None:
    """The file is written inside the learner's sandbox: a malformed line must not crash the
    grader, and is left out."""
    events = tmp_path / "events-0.jsonl"
    good = {"name": "b", "passed": False, "verdict": "v", "saw": "s", "missing": []}
    lines = [
        {"event": "start", "notebook": "08_x"},
        {"event": "verdict", **good, "name": "a", "missing": 5},
        [1],
        {"event": "verdict", **good},
        {"event": "done", "notebook": "08_x"},
    ]
    events.write_text("\n".join(map(json.dumps, lines)) + "\nnot json\n")
    progress = _Progress(events)
    progress.update()
    assert list(progress.verdicts["08_x"]) == ["b"] and progress.done == {"08_x"}


# --- sandboxed runs ---------------------------------------------------------------------------


@pytest.mark.sockets
@pytest.mark.slow
def test_the_instructors_notebooks_score_full_marks_on_every_part(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    learner = _learner(tmp_path)
    rows = grade_notebook_parts(learner / "notebooks", course, proxy=learner / "proxy.py")
    failed = [f"{r.id}: {r.verdict} {dict(r.evidence)}" for r in rows if not r.passed]
    assert not failed, failed
    assert [r.id for r in rows] == [
        f"nb{nb[:2]}.{c}" for nb, checks in PARTS.items() for c in checks
    ]


@pytest.mark.sockets
@pytest.mark.slow
def test_learner_copies_score_zero_on_every_part_each_naming_its_notebook(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    copies = tmp_path / "copies"
    make_student_copies(ROOT / "notebooks", copies)
    (copies / "09_tool_calls_and_partial_json.ipynb").write_text('{"cells": [', "utf-8")
    (copies / "11_metrics_billing_and_retries.ipynb").unlink()
    learner = _learner(tmp_path, copies)
    rows = {
        r.id: r
        for r in grade_notebook_parts(learner / "notebooks", course, proxy=learner / "proxy.py")
    }
    assert not any(r.passed for r in rows.values())
    for nb, checks in PARTS.items():
        for check in checks:
            row = rows[f"nb{nb[:2]}.{check}"]
            if nb.startswith("09"):  # one notebook that does not parse costs its own parts only
                assert row.verdict == f"notebook {nb} could not be read", row
            elif nb.startswith("11"):
                assert row.verdict == f"notebook {nb} was not handed in", row
                assert row.hint == UPLOAD_HINT
            else:
                assert row.verdict.startswith("not written yet: "), row
                assert f"(notebook {nb})" in row.verdict, row
                assert nb in row.hint, row


@pytest.mark.sockets
def test_one_part_made_wrong_fails_exactly_that_part(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    learner = _learner(tmp_path)
    _edit_cell(
        learner / "notebooks" / "09_tool_calls_and_partial_json.ipynb",
        "class ArgumentScanner",
        "                if self.escaped:\n                    self.escaped = False\n"
        '                elif ch == "\\\\":\n                    self.escaped = True\n'
        "                elif ch == '\"':",
        "                if ch == '\"':  # escapes not followed: a wrong scanner",
    )
    rows = grade_notebook_parts(
        learner / "notebooks", _only(course, "09"), proxy=learner / "proxy.py"
    )
    outcomes = {r.id: r.passed for r in rows}
    assert outcomes == {
        "nb09.accumulate": True,
        "nb09.scanner": False,
        "nb09.validate": True,
        "nb09.blocks": True,
        "nb09.transcript": True,
    }
    scanner = next(r for r in rows if r.id == "nb09.scanner")
    assert scanner.verdict.startswith("the persistent scanner's fields equal json.loads")
    assert scanner.evidence["saw"]  # what the judge saw (here, the JSON the wrong scanner cut)
    assert "09_tool_calls_and_partial_json" in scanner.hint


#: 07's ``next_item`` as the notebook warns against: a ``queue.get()`` that gives up without
#: being cancelled takes the item after the heartbeat for nobody.
NEXT_ITEM_SOLVED = """    if not queue.empty():
        return queue.get_nowait()  # under load most events are already waiting: no timer
    try:
        async with asyncio.timeout(HEARTBEAT_S):
            return await queue.get()
    except TimeoutError:
        return None
"""
NEXT_ITEM_LOSES_AN_ITEM = """    getter = asyncio.ensure_future(queue.get())  # never cancelled
    done, _ = await asyncio.wait({getter}, timeout=HEARTBEAT_S)
    return getter.result() if done else None
"""


@pytest.mark.sockets
def test_05_and_07s_proxy_parts_pass_as_written(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    learner = _learner(tmp_path)
    rows = grade_notebook_parts(
        learner / "notebooks", _only(course, "05", "07"), proxy=learner / "proxy.py"
    )
    assert {r.id: r.passed for r in rows} == {"nb05.pass_on": True, "nb07.next_item": True}, [
        (r.id, r.verdict, dict(r.evidence)) for r in rows
    ]


@pytest.mark.sockets
def test_a_stand_in_is_not_written_and_a_next_item_that_loses_an_item_fails(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    """The learner's proxy.py is the reference: the cell handed in is what is judged."""
    copies = tmp_path / "copies"
    make_student_copies(ROOT / "notebooks", copies)
    learner = _learner(tmp_path)
    shutil.copyfile(
        copies / "05_usage_capture.ipynb", learner / "notebooks" / "05_usage_capture.ipynb"
    )
    _edit_cell(
        learner / "notebooks" / "07_heartbeats_and_timeouts.ipynb",
        "async def next_item",
        NEXT_ITEM_SOLVED,
        NEXT_ITEM_LOSES_AN_ITEM,
    )
    rows = {
        r.id: r
        for r in grade_notebook_parts(
            learner / "notebooks", _only(course, "05", "07"), proxy=learner / "proxy.py"
        )
    }
    stand_in = rows["nb05.pass_on"]
    assert not stand_in.passed
    assert stand_in.verdict == "not written yet: pass_on (notebook 05_usage_capture)", stand_in
    lost = rows["nb07.next_item"]
    assert not lost.passed and lost.verdict.startswith("items at once, a heartbeat"), lost
    assert "the item after a heartbeat is not lost" in str(lost.evidence["saw"]), lost
    assert "an item already waiting comes back at once" not in str(lost.evidence["saw"]), lost


#: A known-wrong edit of one part per notebook (notebook, the cell's definition, old, new).
WRONG = [
    # one arrival for the role-only first chunk too: not one per text chunk
    ("01_baseline_streaming", "def stream_with_timings", "if piece:", "if piece is not None:"),
    # Z_FINISH at the end only: the frames stay inside zlib until then
    (
        "03_gzip_buffering",
        "def compress_and_flush",
        "compressor.flush(zlib.Z_SYNC_FLUSH if more_body else zlib.Z_FINISH)",
        "(b'' if more_body else compressor.flush())",
    ),
    ("09_tool_calls_and_partial_json", "class Transcript", '"".join(', '" ".join('),
    # the classic guess: a refused answer that ends with [DONE] looks complete
    (
        "14_browser_chat",
        "def predict",
        '"refusal after 5 tokens": ("interrupted", False)',
        '"refusal after 5 tokens": ("completed", True)',
    ),
]


@pytest.mark.sockets
@pytest.mark.slow
def test_one_known_wrong_part_per_notebook_fails_exactly_that_part(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    learner = _learner(tmp_path)
    for notebook, defines, edit, new in WRONG:
        _edit_cell(learner / "notebooks" / f"{notebook}.ipynb", defines, edit, new)
    rows = grade_notebook_parts(
        learner / "notebooks", _only(course, "01", "03", "09", "14"), proxy=learner / "proxy.py"
    )
    outcomes = {r.id: r.passed for r in rows}
    assert outcomes == {
        "nb01.timing_client": False,
        "nb03.compress_and_flush": False,
        "nb03.should_compress": True,
        "nb09.accumulate": True,
        "nb09.scanner": True,
        "nb09.validate": True,
        "nb09.blocks": True,
        "nb09.transcript": False,
        "nb14.predict": False,
    }, [(r.id, r.verdict, dict(r.evidence)) for r in rows]
    saw = {r.id: str(r.evidence.get("saw", "")) for r in rows}
    assert "11 arrivals for 10 text chunks" in saw["nb01.timing_client"]
    assert "frames that did not decode as soon as they left: [1, " in saw["nb03.compress_and_flush"]
    assert "text() gave 'Hel lo', not 'Hello'" in saw["nb09.transcript"]
    refusal = "refusal after 5 tokens: you predicted ('completed', True)"
    assert saw["nb14.predict"].startswith(refusal)


PLANTED = Path(labkit.checks.__file__).parent / "planted_by_notebook.py"
DAEMON = ["sleep", "923"]
PAYLOAD = """
import os as _os, subprocess as _subprocess, sys as _sys
_PYTHON = {_sys.prefix, _sys.base_prefix}
_seen = {"uid": _os.getuid()}
try:
    with open(PLANTED, "w") as _planted:
        _planted.write("GRADE = 100\\n")
    _seen["planted"] = True
except OSError as _exc:
    _seen["planted"] = type(_exc).__name__
_found = []
for _top in ("/tmp", "/root", "/home", CLASSMATES):
    for _folder, _dirs, _files in _os.walk(_top):
        _dirs[:] = [d for d in _dirs if _os.path.join(_folder, d) not in _PYTHON]
        for _name in _files:
            _path = _os.path.join(_folder, _name)
            try:
                if _name == "proxy.py" and "CLASSMATE-MARKER" in open(_path).read():
                    _found.append(_path)
            except OSError:
                pass
_seen["found"] = _found
_subprocess.Popen(DAEMON, start_new_session=True, stdout=_subprocess.DEVNULL,
                  stderr=_subprocess.DEVNULL)
_report(_seen)
"""


@contextmanager
def _reports(base: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, object]]]:
    """What the hostile cell reported into its own folder, read from outside while it runs
    (``folder_reports``' scheme; the runner's folder churns more, so a sweep that meets a
    folder being removed just tries again)."""
    base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    found: dict[Path, dict[str, object]] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.02):
            try:
                for path in base.rglob(PATTERN):
                    found.setdefault(path, json.loads(path.read_text()))
            except (OSError, ValueError):
                continue

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    reports: list[dict[str, object]] = []
    try:
        yield reports
    finally:
        stop.set()
        thread.join()
        reports.extend(found.values())


def _daemons() -> list[str]:
    shown = subprocess.run(["pgrep", "-af", " ".join(DAEMON)], capture_output=True, text=True)
    return [line for line in shown.stdout.splitlines() if "pgrep" not in line]


@pytest.fixture(scope="module")
def zygote() -> Iterator[str]:
    """A class's zygote, with a few of the course's imports made (the runner makes the rest)."""
    if os.geteuid() != 0 or choose().kind != "bubblewrap":
        pytest.skip("a zygote's runners are for root with a sandbox")
    started = Zygote.start(["openai", "fastapi", "labkit.checks"], clean_env(ROOT), 120)
    assert isinstance(started, Zygote), f"root here, yet no zygote: {started}"
    yield started.path
    started.stop()


@pytest.mark.sockets
@pytest.mark.parametrize("forked", [False, True], ids=["own-runner", "zygote-runner"])
def test_a_hostile_part_cell_is_contained_like_a_hostile_proxy(
    course: list[CourseNotebook],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    forked: bool,
    request: pytest.FixtureRequest,
) -> None:
    if choose().kind != "bubblewrap":
        pytest.skip(f"no sandbox on this machine: {choose().describe()}")
    zygote_path = request.getfixturevalue("zygote") if forked else None
    classmate = tmp_path / "classmate"
    classmate.mkdir()
    (classmate / "proxy.py").write_text("# CLASSMATE-MARKER\n")
    learner = _learner(tmp_path)
    payload = (
        PAYLOAD.replace("PLANTED", repr(str(PLANTED)))
        .replace("CLASSMATES", repr(str(tmp_path)))
        .replace("DAEMON", repr(DAEMON))
    )
    _edit_cell(
        learner / "notebooks" / "08_providers_and_normalisation.ipynb",
        "def to_openai",
        "FINISH = {",
        REPORTER + payload + "\nFINISH = {",
    )
    before = _daemons()
    with _reports(tmp_path / "homes", monkeypatch) as reports:
        rows = grade_notebook_parts(
            learner / "notebooks",
            _only(course, "08"),
            proxy=learner / "proxy.py",
            zygote=zygote_path,
        )

    assert all(r.passed for r in rows), [(r.id, r.verdict, dict(r.evidence)) for r in rows]
    assert len(reports) == 1, "the hostile cell never reported: did it run?"
    seen = reports[0]
    assert seen["uid"] != 0, "notebook code ran as root"
    assert seen["planted"] in ("PermissionError", "OSError"), seen
    assert seen["found"] == [], f"a classmate's file was readable: {seen['found']}"
    assert not PLANTED.exists()
    assert _daemons() == before, "a process the notebook started outlived its grading"


@pytest.mark.sockets
@pytest.mark.slow
def test_a_proxy_file_alone_scores_zero_on_each_part_saying_what_to_upload(
    tmp_path: Path,
) -> None:
    shutil.copyfile(REFERENCE, tmp_path / "bob.py")
    submission = Submission("bob", tmp_path / "bob.py", None, parts=True)
    report = grade_in_worker(submission, Rubric(), only=["trickle"])
    parts = [r for r in report.results if r.id.startswith("nb")]
    assert [r.id for r in parts] == [
        f"nb{nb[:2]}.{c}" for nb, checks in PARTS.items() for c in checks
    ]
    assert all(not r.passed and "make submit" in r.verdict for r in parts)
    assert report.result("trickle") is not None and report.score == 75.0
    feedback = feedback_markdown(report)
    assert "| nb08.adapter | failed | not handed in: only proxy.py was;" in feedback
    back = SubmissionReport.from_json(json.loads(json.dumps(report.to_json())), Rubric())
    assert back.score == report.score and back.max_score == 100


@pytest.mark.sockets
@pytest.mark.slow
def test_a_notebook_that_overruns_its_time_is_stopped_and_the_others_still_graded(
    course: list[CourseNotebook], tmp_path: Path
) -> None:
    learner = _learner(tmp_path)
    _edit_cell(
        learner / "notebooks" / "08_providers_and_normalisation.ipynb",
        "def to_openai",
        "FINISH = {",
        "while True:  # a part cell that never ends\n    pass\n\nFINISH = {",
    )
    # 08 and 11 share a runner and 09 has the other: 11 runs only once 08 has been stopped
    rows = grade_notebook_parts(
        learner / "notebooks",
        _only(course, "08", "09", "11"),
        proxy=learner / "proxy.py",
        budget_s=20,
    )
    outcomes = {r.id: r.passed for r in rows}
    assert outcomes == {i: not i.startswith("nb08") for i in outcomes}, rows
    stopped = next(r for r in rows if r.id == "nb08.adapter")
    assert stopped.verdict.startswith("the check did not run: its graded cells took longer")
    assert stopped.verdict.endswith(" s and were stopped"), stopped


@pytest.mark.sockets
@pytest.mark.slow
def test_a_roster_entry_with_notebooks_is_graded_on_its_proxy_and_its_parts_in_one_report(
    tmp_path: Path,
) -> None:
    learner = _learner(tmp_path)
    (entry,) = find_submissions([tmp_path])
    assert entry.learner == "learner" and entry.parts
    report = grade_in_worker(entry, Rubric(), only=["trickle"])
    assert [r.id for r in report.results] == ["trickle", *PART_IDS]
    assert report.score == report.max_score == 100, report.to_json()
    assert report.points["trickle"] == 75 and report.points["nb13.location"] == 25 / len(PART_IDS)
    assert learner.is_dir()


@pytest.mark.slow
@pytest.mark.sockets
def test_a_class_grades_each_learners_proxy_and_parts_in_lanes_of_their_own_then_joins_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0 or choose().kind != "bubblewrap":
        pytest.skip("a class's zygote is for root with a sandbox")
    for learner in ("ana", "bo"):  # two learners, each handing in 03 and 14 (fast to run)
        (tmp_path / learner / "notebooks").mkdir(parents=True)
        shutil.copyfile(REFERENCE, tmp_path / learner / "proxy.py")
        for stem in ("03_gzip_buffering", "14_browser_chat"):
            shutil.copyfile(
                ROOT / "notebooks" / f"{stem}.ipynb",
                tmp_path / learner / "notebooks" / f"{stem}.ipynb",
            )
    halves: list[tuple[str, str]] = []
    original = roster.grade_in_worker

    def recorded(submission: Submission, *args: Any, **kwargs: Any) -> SubmissionReport:
        halves.append((submission.learner, kwargs["half"]))
        return original(submission, *args, **kwargs)

    monkeypatch.setattr(roster, "grade_in_worker", recorded)
    reports = roster.grade_many(find_submissions([tmp_path]), Rubric(), only=["trickle"])
    assert sorted(halves) == [("ana", "parts"), ("ana", "proxy"), ("bo", "parts"), ("bo", "proxy")]
    for report in reports:
        assert [r.id for r in report.results] == ["trickle", *PART_IDS]
        passed = {r.id for r in report.results if r.passed}
        assert passed == {"trickle", *(p for p in PART_IDS if p[:4] in ("nb03", "nb14"))}, report
        assert report.problem is None and report.isolation, report.to_json()


def test_a_learners_two_halves_join_in_one_report_with_the_first_problem() -> None:
    proxy_half = SubmissionReport(
        "ana", "ana/proxy.py", [labkit.checks.CheckResult("trickle", True, "ok")], Rubric()
    )
    proxy_half = replace(proxy_half, isolation="bubblewrap", elapsed_s=12.0)
    stopped = Problem("submission_timeout", "grading did not finish within 400 s")
    parts_half = _failed(Submission("ana", REFERENCE, None, parts=True), Rubric(), [], stopped, 400)
    joined = roster._joined([proxy_half, parts_half])
    assert [r.id for r in joined.results] == ["trickle", *PART_IDS]
    assert joined.problem == stopped and joined.isolation == "bubblewrap"
    assert joined.elapsed_s == 412.0
    assert joined.points == Rubric().points(["trickle", *PART_IDS])


@pytest.mark.sockets
def test_the_runners_share_one_queue_each_notebook_runs_once_and_a_long_one_holds_back_none(
    tmp_path: Path,
) -> None:
    # Seven notebooks for three runners: the first sleeps long enough for the other two runners
    # to take all six short ones from the queue meanwhile. Fixed shares of the list (notebooks
    # 1, 4, 7 to the first runner) would leave two short notebooks waiting behind the long one.
    runs = [{"notebook": "long", "cells": [["check", "import time; time.sleep(3)"]]}]
    runs += [{"notebook": f"short{n}", "cells": [["check", "x = 1"]]} for n in range(6)]
    (tmp_path / "runs.json").write_text(json.dumps({"runners": 3, "runs": runs}))
    runner = [sys.executable, "-m", "labkit.grading.notebook_runner", "runs.json", "events"]
    subprocess.run(runner, cwd=tmp_path, check=True, timeout=60)
    done: dict[str, list[str]] = {}
    for n in range(3):  # a runner that started after the queue was empty wrote no file
        progress = _Progress(tmp_path / f"events-{n}.jsonl")
        progress.update()
        if progress.done:
            done[f"runner {n}"] = sorted(progress.done)
    ran = sorted(name for names in done.values() for name in names)
    assert ran == sorted(run["notebook"] for run in runs), done
    assert ["long"] in done.values(), done  # the runner that took it took nothing else


@pytest.mark.sockets
def test_in_a_class_graded_at_once_a_learners_notebooks_share_fewer_runners(
    tmp_path: Path, zygote: str
) -> None:
    (tmp_path / "learner" / "notebooks").mkdir(parents=True)
    runs = [NotebookRun(f"nb{n}", (("check", "x = 1"),)) for n in range(4)]
    isolation = choose(NOTEBOOK_LIMITS)
    outcome = _run_once(runs, tmp_path, isolation, 60.0, 60.0, zygote)
    assert len(outcome.progress) == CLASS_RUNNERS < RUNNERS
    assert outcome.done == {"nb0", "nb1", "nb2", "nb3"}
    assert outcome.stopped is None
