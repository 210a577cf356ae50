"""The class's written answers are collected for marking, and the marks come back into grades.csv.

A roster of learners who each answered every question in their own words (the learner copies of
the notebooks, as ``labkit student`` writes them, with the answer prompt replaced) is exported by
``labkit answers``; every answer must be on its question's page and its learner's page, escaped,
in a real browser. Marks written into ``marks.csv`` and merged with ``labkit merge --manual``
must appear in grades.csv exactly as written, the automatic grades untouched.
"""

from __future__ import annotations

import csv
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest
from grading_support import REFERENCE

from labkit.cli import main
from labkit.grading.answers import (
    AnswersError,
    Question,
    collect_roster,
    course_questions,
    fold_manual_marks,
)
from labkit.regions import ANSWER_PROMPT
from labkit.student import make_bundle

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
CLASS_SIZE = 50


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def answer_text(learner: str, question: str) -> str:
    # learner text is untrusted: the pages must show it, not run it
    return f"{learner} on {question}: because <b>flush</b> & [DONE]"


@pytest.fixture(scope="module")
def questions() -> list[Question]:
    return course_questions(NOTEBOOKS)


@pytest.fixture(scope="module")
def learner_notebooks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "bundle"
    make_bundle(NOTEBOOKS, ROOT / "solutions" / "proxy.py", out)
    return out / "notebooks"


def answered_copy(learner: str, source: Path, questions: list[Question], out: Path) -> None:
    """``learner``'s notebooks: each answer prompt replaced by the learner's own answer."""
    out.mkdir(parents=True)
    for path in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        asked = iter(q for q in questions if q.notebook == path.stem)
        for cell in nb.cells:
            while cell.cell_type == "markdown" and ANSWER_PROMPT in cell.source:
                question = next(asked)
                cell.source = cell.source.replace(
                    ANSWER_PROMPT, answer_text(learner, question.id), 1
                )
        nbformat.write(nb, out / path.name)


def make_class(root: Path, source: Path, questions: list[Question], size: int) -> Path:
    """A roster of ``size`` learners: folders, and every third one a .zip, plus a .py alone."""
    roster = root / "roster"
    roster.mkdir()
    for number in range(size):
        learner = f"learner{number:02d}"
        folder = root / "work" / learner
        answered_copy(learner, source, questions, folder / "notebooks")
        shutil.copy(REFERENCE, folder / "proxy.py")
        if number % 3 == 0:
            with zipfile.ZipFile(roster / f"{learner}.zip", "w") as archive:
                for path in folder.rglob("*"):
                    archive.write(path, Path(learner) / path.relative_to(folder))
        else:
            shutil.copytree(folder, roster / learner)
    shutil.copy(REFERENCE, roster / "proxy_only.py")
    return roster


def test_every_question_of_the_course_is_found_with_its_rubric(questions: list[Question]) -> None:
    notebooks = {q.notebook for q in questions}
    assert len(notebooks) == len(list(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
    assert all(q.prompt.startswith("**") for q in questions), [q.id for q in questions]
    marked = [q for q in questions if q.max_points]
    assert len(marked) >= 3 * len(notebooks)
    assert all("Rubric" in q.model_answer for q in marked)


def test_a_class_of_fifty_exports_every_answer_and_a_marks_template(
    tmp_path: Path, questions: list[Question], learner_notebooks: Path
) -> None:
    roster = make_class(tmp_path, learner_notebooks, questions, CLASS_SIZE)
    out = tmp_path / "answers"
    assert main(["answers", "--roster", str(roster), "--out", str(out)]) == 0

    learners = [f"learner{n:02d}" for n in range(CLASS_SIZE)]
    for question in questions:
        page = (out / "questions" / f"{question.id}.html").read_text()
        for learner in learners:
            escaped = answer_text(learner, question.id).replace("<", "&lt;").replace(">", "&gt;")
            assert escaped.replace("&", "&amp;", 1) in page or escaped in page.replace(
                "&amp;", "&"
            ), f"{learner}'s answer to {question.id} is not on its page"
        assert "<b>flush</b>" not in page
    only_proxy = (out / "learners" / "proxy_only.html").read_text()
    assert "handed in no notebooks" in only_proxy
    rows = read_csv(out / "marks.csv")
    marked = [q for q in questions if q.max_points]
    assert len(rows) == (CLASS_SIZE + 1) * len(marked)
    assert {row["points"] for row in rows} == {""}


@pytest.mark.sockets
def test_the_exported_pages_open_in_a_browser_with_every_answer(
    tmp_path: Path, questions: list[Question], learner_notebooks: Path
) -> None:
    from labkit.chat.browser import browser_problem

    problem = browser_problem()
    if problem:
        pytest.skip(f"no browser: {problem}")
    from playwright.sync_api import sync_playwright

    roster = make_class(tmp_path, learner_notebooks, questions, CLASS_SIZE)
    out = tmp_path / "answers"
    assert main(["answers", "--roster", str(roster), "--out", str(out), "--anonymise"]) == 0
    key = {row["id"]: row["learner"] for row in read_csv(out / "key.csv")}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=["--no-sandbox"]
        )
        page = browser.new_page()
        page.goto((out / "index.html").as_uri())
        index = page.inner_text("body")
        assert all(question.id in index for question in questions)
        for question in questions:
            page.goto((out / "questions" / f"{question.id}.html").as_uri())
            shown = page.inner_text("body")
            for anonymous, learner in key.items():
                if learner.startswith("learner"):
                    assert answer_text(learner, question.id) in shown, (question.id, anonymous)
                    assert anonymous in shown
            assert "learner00 on" in shown and "learner00\n" not in shown  # ids, not names
        browser.close()


@pytest.mark.sockets
def test_marks_merged_back_appear_in_grades_csv_exactly_as_written(
    tmp_path: Path,
    questions: list[Question],
    learner_notebooks: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    roster = make_class(tmp_path, learner_notebooks, questions, 3)
    graded = tmp_path / "graded"
    argv = ["grade-class", str(roster), "--only", "trickle", "--out", str(graded)]
    assert main(argv) in (0, 1)
    before = read_csv(graded / "grades.csv")
    answers = tmp_path / "answers"
    assert main(["answers", "--roster", str(roster), "--out", str(answers)]) == 0

    marks = read_csv(answers / "marks.csv")
    written = {}
    for number, row in enumerate(marks):
        if number % 7 == 3:
            continue  # left blank: counted 0, shown blank
        row["points"] = str(number % (int(row["max_points"]) + 1))
        written[(row["learner"], row["question"])] = row["points"]
    with open(answers / "marks.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(marks[0]))
        writer.writeheader()
        writer.writerows(marks)

    merged = tmp_path / "merged"
    manual = ["--manual", str(answers / "marks.csv")]
    assert main(["merge", str(graded), "--out", str(merged), *manual]) in (0, 1)
    assert "still blank" in capsys.readouterr().out
    after = read_csv(merged / "grades.csv")
    assert [row["learner"] for row in after] == [row["learner"] for row in before]
    for old, new in zip(before, after, strict=True):
        assert {k: new[k] for k in old} == old  # the automatic grades are untouched
        learner = new["learner"]
        for question in {q for (_, q) in written}:
            assert new[f"written:{question}"] == written.get((learner, question), "")
        expected = sum(float(v) for (who, _), v in written.items() if who == learner)
        assert float(new["written_score"]) == expected
        most = sum(q.max_points for q in questions)
        assert float(new["written_max"]) == most


def test_marks_that_cannot_be_right_are_refused_with_the_line_to_fix(tmp_path: Path) -> None:
    grades = tmp_path / "grades.csv"
    grades.write_text("learner,score\nana,10\n")
    marks = tmp_path / "marks.csv"
    marks.write_text("learner,question,max_points,points,comment\nana,02-q1,3,4,\n")
    with pytest.raises(AnswersError, match=r"line 2: 4 points is outside 0..3 for 02-q1"):
        fold_manual_marks(grades, marks)
    marks.write_text("learner,question,max_points,points,comment\nbob,02-q1,3,1,\n")
    with pytest.raises(AnswersError, match=r"'bob' is not in .*anonymised pages need their key"):
        fold_manual_marks(grades, marks)
    marks.write_text("learner,question,max_points,points,comment\nana,02-q1,3,two,\n")
    with pytest.raises(AnswersError, match=r"points 'two' is not a number"):
        fold_manual_marks(grades, marks)


def test_a_broken_zip_and_an_unreadable_notebook_cost_only_their_own_answers(
    tmp_path: Path, questions: list[Question]
) -> None:
    roster = tmp_path / "roster"
    (roster / "ana" / "notebooks").mkdir(parents=True)
    (roster / "ana" / "notebooks" / "02_forwarding_proxy.ipynb").write_text("{not json")
    (roster / "ben.zip").write_bytes(b"not a zip")
    with pytest.raises(AnswersError, match=r"ben.zip is not a readable zip"):
        collect_roster(roster, questions)
    (roster / "ben.zip").unlink()
    (ana,) = collect_roster(roster, questions)
    assert "02_forwarding_proxy.ipynb could not be read" in ana.note
    assert ana.answers == {}


def test_a_zip_in_the_roster_is_graded_by_its_proxy_and_one_without_says_what_to_send(
    tmp_path: Path,
) -> None:
    from labkit.grading.roster import GradingError, find_submissions

    roster = tmp_path / "roster"
    roster.mkdir()
    with zipfile.ZipFile(roster / "ana.zip", "w") as archive:
        archive.write(REFERENCE, "ana/proxy.py")
        archive.writestr("ana/notebooks/02_forwarding_proxy.ipynb", "{}")
    (found,) = find_submissions([roster])
    assert found.learner == "ana"
    assert found.path.read_bytes() == REFERENCE.read_bytes()
    with zipfile.ZipFile(roster / "ben.zip", "w") as archive:
        archive.writestr("ben/notes.txt", "no proxy here")
    with pytest.raises(GradingError, match=r"ben.zip holds no proxy.py .*`make submit`"):
        find_submissions([roster])


@pytest.mark.sockets
def test_make_submit_in_the_bundle_writes_the_zip_the_roster_and_answers_read(
    tmp_path: Path, questions: list[Question], learner_notebooks: Path
) -> None:
    import subprocess

    from labkit.grading.roster import find_submissions

    bundle = tmp_path / "bundle"
    shutil.copytree(learner_notebooks.parent, bundle, ignore=shutil.ignore_patterns(".venv"))
    answered = tmp_path / "answered"
    answered_copy("zoe", learner_notebooks, questions, answered)
    shutil.rmtree(bundle / "notebooks")
    shutil.copytree(answered, bundle / "notebooks")
    (bundle / "notebooks" / ".ipynb_checkpoints").mkdir()
    (bundle / "notebooks" / ".ipynb_checkpoints" / "02-checkpoint.ipynb").write_text("{}")
    (bundle / ".venv").mkdir()
    (bundle / ".venv" / "big").write_text("x")
    done = subprocess.run(["make", "-s", "submit"], cwd=bundle, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(bundle / "submission.zip") as archive:
        names = set(archive.namelist())
    notebooks = {f"notebooks/{p.name}" for p in answered.glob("*.ipynb")}
    assert names == {"proxy.py", *notebooks}

    roster = tmp_path / "roster"
    roster.mkdir()
    shutil.copy(bundle / "submission.zip", roster / "zoe.zip")
    (found,) = find_submissions([roster])
    assert (found.learner, found.path.read_bytes()) == ("zoe", (bundle / "proxy.py").read_bytes())
    (zoe,) = collect_roster(roster, questions)
    assert zoe.answers == {q.id: answer_text("zoe", q.id) for q in questions}
