"""One submission's grade, and the ways to show it: terminal table, JSON, Gradescope, feedback.

Renderers return strings or dicts; only the CLI prints and writes files. Everything a learner
reads (table, feedback) puts the deterministic verdicts first and the measured numbers after.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.checks import CHECK_IDS, CheckResult
from labkit.checks.catalogue import BY_ID
from labkit.checks.result import MARKS
from labkit.errors import ProblemKind
from labkit.grading.rubric import Rubric, is_part_id
from labkit.grading.similarity import SimilarityRow

__all__ = [
    "CSV_FIELDS",
    "Problem",
    "SubmissionReport",
    "csv_fields",
    "csv_row",
    "feedback_markdown",
    "part_ids",
    "render_table",
    "summary_of",
]

SUMMARIES = {check.id: check.summary for check in BY_ID.values()}


def summary_of(check_id: str) -> str:
    """A check's summary; for an in-notebook part (``nb08.adapter``), the notebook it is in."""
    known = SUMMARIES.get(check_id)
    return known if known is not None else f"written in notebook {check_id[2:4]}"


@dataclass(frozen=True)
class Problem:
    """Why a submission could not be graded (fully): ``kind`` is stable (one of
    ``ProblemKind``, the kind of the error that caused it, if one did), ``message`` plain."""

    kind: ProblemKind
    message: str
    details: str = ""


@dataclass
class SubmissionReport:
    """The grade of one submission (a file, or a URL in black-box mode)."""

    name: str
    target: str
    results: list[CheckResult]
    rubric: Rubric
    problem: Problem | None = None
    elapsed_s: float = 0.0
    isolation: str = ""  # where the learner's code ran (labkit.grading.isolation)
    network: str = ""  # "loopback only" or "shared (why)" (labkit.grading.network)
    machine: str = ""  # the CPU the grader had, and what that did to its time budgets
    upstream: str = ""  # a real engine the proxy forwarded to (labkit grade --engine); "": the mock
    points: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.points = self.rubric.points([r.id for r in self.results if self.counts(r)])

    def counts(self, result: CheckResult) -> bool:
        """Whether ``result`` is part of the total: run and decided, or inconclusive under a
        rubric that awards those."""
        return not result.skipped or (result.inconclusive and self.rubric.awards_inconclusive)

    def earned(self, result: CheckResult) -> bool:
        return result.passed or (result.inconclusive and self.rubric.awards_inconclusive)

    @property
    def inconclusive(self) -> list[CheckResult]:
        return [r for r in self.results if r.inconclusive]

    @property
    def score(self) -> float:
        return round(sum(self.points[r.id] for r in self.results if self.earned(r)), 2)

    @property
    def max_score(self) -> float:
        return round(sum(self.points.values()), 2)

    @property
    def all_passed(self) -> bool:
        return self.problem is None and all(r.passed or r.skipped for r in self.results)

    @property
    def passed_count(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def counted_count(self) -> int:
        return sum(not r.skipped for r in self.results)

    def tally(self) -> str:
        """``9 of 10 checks passed``, and how many the machine could not decide."""
        text = f"{self.passed_count} of {self.counted_count} checks passed"
        if self.inconclusive:
            how = "awarded" if self.rubric.awards_inconclusive else "not counted"
            text += f"; {len(self.inconclusive)} inconclusive on this machine, {how}"
        return text

    def result(self, check_id: str) -> CheckResult | None:
        return next((r for r in self.results if r.id == check_id), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "submission": self.name,
            "target": self.target,
            "score": self.score,
            "max_score": self.max_score,
            "all_passed": self.all_passed,
            "problem": None
            if self.problem is None
            else {
                "kind": self.problem.kind,
                "message": self.problem.message,
                "details": self.problem.details,
            },
            "elapsed_s": round(self.elapsed_s, 2),
            "isolation": self.isolation,
            "network": self.network,
            "machine": self.machine,
            "upstream": self.upstream or "mock",
            "checks": {
                r.id: {**r.to_json(), "points": round(self.points.get(r.id, 0.0), 2)}
                for r in self.results
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], rubric: Rubric) -> SubmissionReport:
        problem = data.get("problem")
        results = [
            CheckResult(
                id=check_id,
                passed=bool(item["passed"]),
                verdict=str(item["verdict"]),
                evidence=dict(item.get("evidence", {})),
                hint=str(item.get("hint", "")),
                skipped=item.get("status") == "skipped",
                warning=str(item.get("warning", "")),  # reports written before warnings lack it
            )
            for check_id, item in data["checks"].items()
        ]
        return cls(
            name=str(data["submission"]),
            target=str(data["target"]),
            results=results,
            rubric=rubric,
            problem=None if problem is None else Problem(**problem),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            isolation=str(data.get("isolation", "")),
            network=str(data.get("network", "")),
            machine=str(data.get("machine", "")),
            upstream="" if data.get("upstream", "mock") == "mock" else str(data["upstream"]),
        )


def _points(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _evidence_text(result: CheckResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in result.evidence.items())


def _warning_items(result: CheckResult) -> list[str]:
    """The feedback's warning line for ``result`` (none without a warning)."""
    return [f"- **Warning**: {result.warning}"] if result.warning else []


def render_table(report: SubmissionReport, *, evidence: bool = True) -> str:
    """The terminal view: one line per check, then what was seen and what to change."""
    lines = [f"Grading {report.name}"]
    if report.isolation:
        lines.append(f"  ran in: {report.isolation}")
    if report.network:
        lines.append(f"  network: {report.network}")
    if report.machine:
        lines.append(f"  machine: {report.machine}")
    if report.upstream:
        lines.append(f"  upstream: {report.upstream}")
    if report.problem is not None:
        lines.append(f"  problem: {report.problem.message}")
    width = max(len(i) for i in CHECK_IDS)
    for result in report.results:
        lines.append(f"  {MARKS[result.outcome]}  {result.id:<{width}}  {result.verdict}")
        if result.warning:
            lines.append(f"        warning: {result.warning}")
        shown = result.status == "failed" or result.inconclusive or bool(result.warning)
        if evidence and shown and report.problem is None:
            if result.evidence:
                lines.append(f"        seen: {_evidence_text(result)}")
            if result.status == "failed":
                lines.append(f"        fix:  {result.hint}")
    lines.append(f"Score: {_points(report.score)}/{_points(report.max_score)} ({report.tally()})")
    if report.inconclusive:
        lines.append(
            "  ???? = inconclusive: this machine was too slow to decide; never a fail. Grade "
            "on a machine with at least half a CPU to decide it (see the README)."
        )
    return "\n".join(lines)


def _feedback_section(result: CheckResult, *more: str) -> list[str]:
    """One check's section of the feedback: its verdict, warning and evidence, then ``more``."""
    return [
        f"### {result.id}: {summary_of(result.id)}",
        "",
        f"- **Verdict**: {result.verdict}",
        *_warning_items(result),
        f"- **Observed**: {_evidence_text(result) or 'nothing measurable'}",
        *more,
        "",
    ]


def feedback_markdown(report: SubmissionReport, similarity: SimilarityRow | None = None) -> str:
    """What a learner gets back: each failed check with what was observed and what to change,
    and a neutral note if ``similarity`` flags the code as a near-copy (naming nobody: the
    instructor's ``similarity.md`` says of what)."""
    lines = [
        f"# Feedback for {report.name}",
        "",
        f"Score: **{_points(report.score)} / {_points(report.max_score)}** ({report.tally()}).",
        "",
    ]
    if report.problem is not None:
        lines += ["## Your proxy could not be graded fully", "", report.problem.message, ""]
        if report.problem.details:
            lines += ["```", report.problem.details.rstrip(), "```", ""]
    failed = [r for r in report.results if r.status == "failed"]
    if failed and report.problem is None:
        lines += ["## What to fix", ""]
        for result in failed:
            lines += _feedback_section(result, f"- **What to change**: {result.hint}")
    warned = [r for r in report.results if r.status == "passed" and r.warning]
    if warned and report.problem is None:
        lines += ["## Passed, with a warning", ""]
        for result in warned:
            lines += _feedback_section(result)
    if report.inconclusive:
        lines += ["## Not decided on the grader's machine", ""]
        lines += [
            "The grader's machine was too slow to run these experiments to the end. That is "
            "not your proxy's fault, and it "
            + (
                "was given full points."
                if report.rubric.awards_inconclusive
                else "is left out of your total."
            ),
            "",
        ]
        for result in report.inconclusive:
            lines.append(f"- **{result.id}**: {result.verdict} ({_evidence_text(result)})")
        lines.append("")
    if similarity is not None and similarity.near_copy is not None:
        against, match = similarity.near_copy
        whom = {"reference": "the reference solution", "learner": "another submission"}[against]
        lines += [
            "## Similarity",
            "",
            f"Much of this code closely matches {whom} (similarity {match.score:.2f}, where 1 "
            "means the same code once names, comments and layout are set aside). Your "
            "instructor sees this note next to your grade; it does not change your score.",
            "",
        ]
    lines += ["## All checks", "", "| check | result | verdict |", "|---|---|---|"]
    for result in report.results:
        lines.append(f"| {result.id} | {result.outcome} | {result.verdict} |")
    return "\n".join(lines) + "\n"


SIMILARITY_FIELDS = (
    "similar_to_reference",
    "most_similar_learner",
    "similarity",
    "similarity_flag",
)
CSV_FIELDS: Sequence[str] = (
    "learner",
    "file",
    "score",
    "max_score",
    *CHECK_IDS,
    "problem",
    *SIMILARITY_FIELDS,
)


def part_ids(reports: Iterable[SubmissionReport]) -> list[str]:
    """The in-notebook parts (``nb08.adapter``) any of ``reports`` has, in course order: by
    notebook, then in the order the reports list them."""
    found: dict[str, None] = {}
    for report in reports:
        found.update((r.id, None) for r in report.results if is_part_id(r.id))
    return sorted(found, key=lambda part: part[2:4])  # stable: each notebook's own order stays


def csv_fields(reports: Iterable[SubmissionReport]) -> list[str]:
    """grades.csv's columns: ``CSV_FIELDS``, with one column per in-notebook part of
    ``reports`` after the checks' (none when no submission handed in notebooks)."""
    parts = part_ids(reports)
    at = CSV_FIELDS.index("problem")
    return [*CSV_FIELDS[:at], *parts, *CSV_FIELDS[at:]]


def csv_row(report: SubmissionReport, similarity: SimilarityRow | None = None) -> dict[str, str]:
    """One roster line: a column per check and per in-notebook part the report has (see
    ``csv_fields``); the similarity columns stay empty when ``similarity`` is None."""
    row = {
        "learner": report.name,
        "file": report.target,
        "score": _points(report.score),
        "max_score": _points(report.max_score),
        "problem": "" if report.problem is None else report.problem.kind,
        **dict.fromkeys(SIMILARITY_FIELDS, ""),
    }
    if similarity is not None:
        to_reference, to_closest = similarity.to_reference, similarity.to_closest
        row["similar_to_reference"] = "" if to_reference is None else f"{to_reference.score:.2f}"
        row["most_similar_learner"] = similarity.closest or ""
        row["similarity"] = "" if to_closest is None else f"{to_closest.score:.2f}"
        row["similarity_flag"] = similarity.flag
    for check_id in CHECK_IDS:
        result = report.result(check_id)
        row[check_id] = "" if result is None else result.outcome
    for result in report.results:
        if is_part_id(result.id):
            row[result.id] = result.outcome
    return row
