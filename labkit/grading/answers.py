"""The learners' written answers, collected for an instructor to mark, and the marks folded back.

Every notebook ends with verification questions (and 14 with the deliverable's notes). In the
instructor's copy each answer is a solution region in a markdown cell, a model answer and, for
the questions that are marked, a rubric of one point per bullet; the learner copy has
``_Write your answer here._`` in its place. A learner's answer is the text that follows the
question in the learner's notebook, up to the next question (or the end of that cell).

``labkit answers --roster DIR --out OUT`` writes::

    OUT/index.html            the questions, with how many learners answered each
    OUT/questions/<id>.html   one question, its rubric (for the instructor) and every answer
    OUT/learners/<id>.html    one learner's answers, images included
    OUT/marks.csv             learner, question, max_points, points, comment: fill in points
    OUT/key.csv               with --anonymise: which id is which learner (keep it private)

``labkit merge ROSTER_OUT --manual marks.csv --out NEW`` folds the marks into ``grades.csv`` as
one ``written:<question>`` column each, with ``written_score`` and ``written_max``.

A roster entry is a folder or a ``.zip`` named for the learner holding ``notebooks/`` (and
``proxy.py``), or a ``.py`` file, which has no answers. Learner text is untrusted: every page
escapes it, and images are embedded only as PNG, JPEG or GIF data.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from labkit.errors import AnswersError
from labkit.regions import ANSWER_PROMPT, BEGIN, END

__all__ = [
    "AnswersError",
    "LearnerAnswers",
    "Question",
    "collect_roster",
    "course_questions",
    "fold_manual_marks",
    "learner_answers",
    "write_answer_pages",
]

NOTEBOOK_NAME = re.compile(r"(?:^|/)notebooks/(\d\d_\w+\.ipynb)$")
RUBRIC = re.compile(r"^\*Rubric[^*]*\*\s*$", re.MULTILINE)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024  # a notebook bigger than this in a zip is not read
MARK_FIELDS = ("learner", "question", "max_points", "points", "comment")


@dataclass(frozen=True)
class Question:
    """One question of one notebook: what the learner was asked, the model answer and rubric."""

    notebook: str  # "02_forwarding_proxy"
    index: int  # its place among the notebook's questions, from 1
    prompt: str  # the question as the notebook asks it (markdown)
    model_answer: str  # the instructor's answer, rubric included

    @property
    def id(self) -> str:
        return f"{self.notebook[:2]}-q{self.index}"

    @property
    def max_points(self) -> int:
        """One point per bullet of the rubric; 0 for text collected but not marked (notes)."""
        found = RUBRIC.search(self.model_answer)
        if found is None:
            return 0
        after = self.model_answer[found.end() :]
        return sum(1 for line in after.splitlines() if line.lstrip().startswith(("- ", "* ")))


@dataclass
class LearnerAnswers:
    """What one learner wrote: question id -> answer (markdown), and the images they attached."""

    learner: str
    answers: dict[str, str] = field(default_factory=dict)
    images: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # id -> (type, b64)
    note: str = ""  # why there is nothing, when there is nothing


def _prompt_before(text: str) -> str:
    """The last paragraph before a solution region: the question it answers."""
    paragraphs = [part.strip() for part in re.split(r"\n\s*\n", text) if part.strip()]
    return paragraphs[-1] if paragraphs else ""


def course_questions(notebooks_dir: Path) -> list[Question]:
    """Every question of the instructor's notebooks, in course order."""
    questions = []
    for path in sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        index = 0
        for cell in nb.cells:
            if cell.cell_type != "markdown" or BEGIN not in cell.source:
                continue
            rest = cell.source
            while BEGIN in rest:
                before, after = rest.split(BEGIN, 1)
                answer, rest = after.split(END, 1) if END in after else (after, "")
                index += 1
                questions.append(Question(path.stem, index, _prompt_before(before), answer.strip()))
    if not questions:
        raise AnswersError(
            f"{notebooks_dir} has no questions (markdown solution regions): expected the "
            "instructor's notebooks, whose written answers are solution regions."
        )
    return questions


def _answer_after(source: str, prompt: str, prompts: Iterable[str]) -> str | None:
    """The text after ``prompt`` in ``source``, up to the next of ``prompts``; None if absent."""
    start = source.find(prompt)
    if start < 0:
        return None
    text = source[start + len(prompt) :]
    ends = [found for other in prompts if other != prompt and (found := text.find(other)) >= 0]
    text = text[: min(ends)] if ends else text
    text = text.replace(ANSWER_PROMPT, "").strip()
    return text


def _images(cell: nbformat.NotebookNode) -> list[tuple[str, str]]:
    found = []
    for attachment in (cell.get("attachments") or {}).values():
        for kind, data in attachment.items():
            if kind in IMAGE_TYPES and isinstance(data, str):
                try:
                    base64.b64decode(data, validate=True)
                except ValueError:
                    continue
                found.append((kind, data))
    return found


def learner_answers(
    learner: str, notebooks: Mapping[str, bytes], questions: Sequence[Question]
) -> LearnerAnswers:
    """``notebooks``: file name -> content, as the learner handed them in."""
    result = LearnerAnswers(learner)
    by_notebook: dict[str, list[Question]] = {}
    for question in questions:
        by_notebook.setdefault(question.notebook, []).append(question)
    for notebook, asked in by_notebook.items():
        content = notebooks.get(f"{notebook}.ipynb")
        if content is None:
            continue
        try:
            nb = nbformat.reads(content.decode("utf-8", errors="replace"), as_version=4)
        except Exception as exc:  # any unreadable notebook costs only its own answers
            result.note += f"{notebook}.ipynb could not be read ({type(exc).__name__}). "
            continue
        prompts = [question.prompt for question in asked]
        for question in asked:
            for cell in nb.cells:
                if cell.cell_type != "markdown":
                    continue
                answer = _answer_after(cell.source, question.prompt, prompts)
                if answer is not None:
                    result.answers[question.id] = answer
                    if images := _images(cell):
                        result.images[question.id] = images
                    break
    if not notebooks:
        result.note += "handed in no notebooks (a proxy.py alone): no written answers. "
    return result


def _read_entry(entry: Path) -> dict[str, bytes]:
    """The notebooks of one roster entry, by file name."""
    found: dict[str, bytes] = {}
    if entry.suffix == ".zip":
        try:
            with zipfile.ZipFile(entry) as archive:
                for info in archive.infolist():
                    match = NOTEBOOK_NAME.search(info.filename)
                    if match and info.file_size <= MAX_NOTEBOOK_BYTES:
                        found[match.group(1)] = archive.read(info)
        except zipfile.BadZipFile as exc:
            raise AnswersError(
                f"{entry} is not a readable zip ({exc}): ask for it again."
            ) from None
    elif entry.is_dir():
        for path in sorted((entry / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            found[path.name] = path.read_bytes()
    return found


def collect_roster(roster: Path, questions: Sequence[Question]) -> list[LearnerAnswers]:
    """Every learner of ``roster`` (folders, zips and .py files named for the learner)."""
    if not roster.is_dir():
        raise AnswersError(
            f"{roster} is not a folder: pass the roster folder, one entry a learner."
        )
    entries = sorted(
        path
        for path in roster.iterdir()
        if path.is_dir() or path.suffix in (".zip", ".py")
        if not path.name.startswith(".")
    )
    if not entries:
        raise AnswersError(
            f"{roster} has no submissions: each learner is a folder or .zip (proxy.py and "
            "notebooks/) or a .py file named for them."
        )
    return [learner_answers(entry.stem, _read_entry(entry), questions) for entry in entries]


# ---------------------------------------------------------------------------------------------
# The pages


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; }
.answer, .rubric { white-space: pre-wrap; border-left: 3px solid #888; padding: .3rem .8rem; }
.rubric { border-color: #c60; background: #fff6ea; }
.empty { color: #a00; }
img { max-width: 100%; border: 1px solid #ccc; }
"""


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n<h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def _answer_html(learner: LearnerAnswers, question: Question) -> str:
    text = learner.answers.get(question.id)
    if not text:
        reason = "not answered" if question.id in learner.answers else "no answer found"
        shown = f'<p class="empty">({reason}{": " + learner.note if learner.note else ""})</p>'
    else:
        shown = f'<div class="answer">{html.escape(text)}</div>'
    images = "".join(
        f'<p><img alt="image attached by the learner" src="data:{kind};base64,{data}"></p>'
        for kind, data in learner.images.get(question.id, [])
    )
    return shown + images


def write_answer_pages(
    out: Path,
    questions: Sequence[Question],
    learners: Sequence[LearnerAnswers],
    *,
    anonymise: bool = False,
) -> dict[str, str]:
    """Write the pages and the marks template; return learner -> the id the pages show."""
    shown = {
        learner.learner: (f"learner-{number:03d}" if anonymise else learner.learner)
        for number, learner in enumerate(learners, start=1)
    }
    for folder in ("questions", "learners"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    rows = []
    for question in questions:
        answered = sum(1 for learner in learners if learner.answers.get(question.id))
        points = f"{question.max_points} points" if question.max_points else "not marked"
        rows.append(
            f'<li><a href="questions/{question.id}.html">{question.id}</a> '
            f"({html.escape(question.notebook)}, {points}): {answered} of {len(learners)} "
            f"answered</li>"
        )
        blocks = [
            f"<h2>{html.escape(shown[learner.learner])}</h2>{_answer_html(learner, question)}"
            for learner in learners
        ]
        body = (
            f'<div class="answer">{html.escape(question.prompt)}</div>'
            f'<h2>Model answer and rubric (instructor only)</h2><div class="rubric">'
            f"{html.escape(question.model_answer)}</div>\n" + "\n".join(blocks)
        )
        (out / "questions" / f"{question.id}.html").write_text(
            _page(f"{question.id}: {question.notebook}", body), encoding="utf-8"
        )
    learner_links = []
    for learner in learners:
        name = shown[learner.learner]
        body = "\n".join(
            f"<h2>{question.id} ({html.escape(question.notebook)})</h2>"
            f'<div class="answer">{html.escape(question.prompt)}</div>'
            f"{_answer_html(learner, question)}"
            for question in questions
        )
        (out / "learners" / f"{name}.html").write_text(_page(name, body), encoding="utf-8")
        learner_links.append(f'<li><a href="learners/{name}.html">{html.escape(name)}</a></li>')
    index = (
        "<h2>Questions</h2><ul>" + "".join(rows) + "</ul><h2>Learners</h2><ul>"
        + "".join(learner_links) + "</ul>"
    )  # fmt: skip
    (out / "index.html").write_text(_page("Written answers", index), encoding="utf-8")
    with open(out / "marks.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(MARK_FIELDS))
        writer.writeheader()
        for learner in learners:
            for question in questions:
                if question.max_points:
                    writer.writerow(
                        {
                            "learner": shown[learner.learner],
                            "question": question.id,
                            "max_points": question.max_points,
                            "points": "",
                            "comment": "",
                        }
                    )
    if anonymise:
        with open(out / "key.csv", "w", newline="", encoding="utf-8") as handle:
            keys = csv.writer(handle)
            keys.writerow(["id", "learner"])
            keys.writerows((shown[learner.learner], learner.learner) for learner in learners)
    return shown


# ---------------------------------------------------------------------------------------------
# The marks, folded into grades.csv


def _read_csv(path: Path, what: str) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    except FileNotFoundError:
        raise AnswersError(f"{what} {path} does not exist.") from None


def _points(row: Mapping[str, str], line: int, path: Path) -> float | None:
    text = (row.get("points") or "").strip()
    if not text:
        return None
    try:
        points = float(text)
        most = float(row.get("max_points") or "inf")
    except ValueError:
        raise AnswersError(f"{path}, line {line}: points {text!r} is not a number.") from None
    if not 0 <= points <= most:
        raise AnswersError(
            f"{path}, line {line}: {points:g} points is outside 0..{most:g} for "
            f"{row.get('question')}: correct it and merge again."
        )
    return points


def fold_manual_marks(grades: Path, marks: Path, key: Path | None = None) -> list[str]:
    """Add the marks of ``marks`` to ``grades`` (a grades.csv, rewritten in place) as one
    ``written:<question>`` column each plus ``written_score`` and ``written_max``. Returns the
    marks still blank (``learner question``), which count 0 and are left blank in the table."""
    names = {row["id"]: row["learner"] for row in _read_csv(key, "The key")} if key else {}
    table = _read_csv(grades, "The grades table")
    learners = {row["learner"] for row in table}
    by_learner: dict[str, dict[str, float | None]] = {}
    maxima: dict[str, float] = {}
    for line, row in enumerate(_read_csv(marks, "The marks file"), start=2):
        learner = names.get(row.get("learner", ""), row.get("learner", ""))
        if learner not in learners:
            raise AnswersError(
                f"{marks}, line {line}: {row.get('learner')!r} is not in {grades}"
                + ("" if key else " (anonymised pages need their key.csv to name the learners)")
                + "."
            )
        question = row.get("question", "")
        by_learner.setdefault(learner, {})[question] = _points(row, line, marks)
        maxima[question] = float(row.get("max_points") or 0)
    columns = [f"written:{question}" for question in maxima]
    blank = []
    for row in table:
        marked = by_learner.get(row["learner"], {})
        for question in maxima:
            points = marked.get(question)
            row[f"written:{question}"] = "" if points is None else f"{points:g}"
            if points is None:
                blank.append(f"{row['learner']} {question}")
        row["written_score"] = f"{sum(p for p in marked.values() if p is not None):g}"
        row["written_max"] = f"{sum(maxima.values()):g}"
    fields = [name for name in table[0] if not name.startswith("written")] if table else []
    fields += [*columns, "written_score", "written_max"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(table)
    grades.write_text(buffer.getvalue(), encoding="utf-8")
    return blank
