"""A class's results on disk, graded in one run or in shards on many machines, then merged.

``labkit grade-class DIR --out OUT`` writes::

    OUT/grades.csv          one line per submission (``report.csv_fields``: a column per check,
                            then one per in-notebook part, ``nb08.adapter``, in course order)
    OUT/feedback/NAME.md    what each learner gets back; OUT/feedback/summary.png the class
    OUT/reports/NAME.json   the full report, evidence included
    OUT/sources/NAME.py     the graded file, so a merge can compare submissions for similarity
    OUT/similarity.md       near-copies and the lines that matched, for the instructor
                            (not scored)
    OUT/roster.json         which submissions this run graded, in the roster's order

With ``--shard K/N`` a run grades the K-th of N disjoint slices of the roster (submissions in
the roster's stable order, by file name; slice K takes every N-th from the K-th), so N
machines (a Kubernetes Indexed Job, a Slurm array, a GitHub Actions matrix) can grade a class
side by side. ``merge`` joins their folders into one, the same as a single run's: the rows in
the roster's order, and similarity measured over the whole class.
"""

from __future__ import annotations

import csv
import json
import re
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.checks import CHECK_IDS
from labkit.errors import MergeError
from labkit.grading.report import SubmissionReport, csv_fields, csv_row, feedback_markdown
from labkit.grading.roster import Submission
from labkit.grading.rubric import Rubric
from labkit.grading.similarity import (
    DEFAULT_THRESHOLD,
    SimilarityRow,
    compare_roster,
    similarity_markdown,
)

__all__ = [
    "MANIFEST",
    "ClassResults",
    "MergeError",
    "Shard",
    "failures_by_check",
    "merge",
    "parse_shard",
    "summary_lines",
    "write_results",
]

MANIFEST = "roster.json"
SUMMARY_CHART = "summary.png"
BINS = 10  # score distribution: tenths of max_score


@dataclass(frozen=True)
class Shard:
    """The ``index``-th (1-based) of ``count`` disjoint slices of a roster."""

    index: int
    count: int

    def take(self, submissions: Sequence[Submission]) -> list[Submission]:
        return [s for i, s in enumerate(submissions) if i % self.count == self.index - 1]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` as a Shard. Raises ``ValueError`` with what to write instead."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise ValueError(
            f"{text!r} is not K/N with 1 <= K <= N, e.g. 1/4 for the first of "
            "four slices (a Kubernetes Indexed Job passes $((JOB_COMPLETION_INDEX + 1))/N)."
        )
    return Shard(int(match[1]), int(match[2]))


@dataclass(frozen=True)
class ClassResults:
    """What a run or a merge wrote, for the CLI to summarise."""

    out: Path
    reports: list[SubmissionReport]
    similarity: dict[str, SimilarityRow] | None


def _write_table(
    out: Path, reports: Sequence[SubmissionReport], similar: Mapping[str, SimilarityRow]
) -> None:
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=csv_fields(reports))
        writer.writeheader()
        for report in reports:
            writer.writerow(csv_row(report, similar.get(report.name)))


def write_results(
    out: Path,
    reports: Sequence[SubmissionReport],
    sources: Mapping[str, str],
    *,
    order: Mapping[str, int],
    total: int,
    shard: Shard | None = None,
    reference: tuple[Path, str] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> ClassResults:
    """Write a run's folder (see the module docstring). ``order`` places each learner in the
    whole roster of ``total``; ``reference`` (path, text) turns on similarity, measured over
    ``sources``: ``similarity.md`` shows each near-copy's matched lines beside the lines they
    match (``SimilarityRow.matched``)."""
    feedback_dir, json_dir, source_dir = out / "feedback", out / "reports", out / "sources"
    for folder in (feedback_dir, json_dir, source_dir):
        folder.mkdir(parents=True, exist_ok=True)
    ordered = sorted(reports, key=lambda r: order[r.name])
    similar: dict[str, SimilarityRow] | None = None
    if reference is not None:
        in_order = dict(sorted(sources.items(), key=lambda item: order[item[0]]))  # ties
        similar = compare_roster(in_order, reference=reference[1], threshold=threshold)
        (out / "similarity.md").write_text(
            similarity_markdown(similar, reference=str(reference[0]))
        )
    _write_table(out, ordered, similar or {})
    for report in ordered:
        row = None if similar is None else similar.get(report.name)
        (feedback_dir / f"{report.name}.md").write_text(feedback_markdown(report, row))
        (json_dir / f"{report.name}.json").write_text(json.dumps(report.to_json(), indent=2))
        if report.name in sources:
            (source_dir / f"{report.name}.py").write_text(sources[report.name], encoding="utf-8")
    manifest = {
        "shard": None if shard is None else [shard.index, shard.count],
        "total": total,
        "order": {r.name: order[r.name] for r in ordered},
        "rubric": ordered[0].rubric.to_json() if ordered else None,
        "threshold": threshold,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if ordered:
        summary_chart(ordered, feedback_dir / SUMMARY_CHART)
    return ClassResults(out, ordered, similar)


def _read_manifest(folder: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise MergeError(
            f"{folder} has no {MANIFEST}: it holds no graded shard. Pass the folders the shards "
            "wrote their results to."
        ) from None
    except ValueError as exc:
        raise MergeError(
            f"{folder / MANIFEST} is not valid JSON ({exc}): grade that shard again."
        ) from None
    return data


def merge(
    folders: Sequence[Path],
    out: Path,
    rubric: Rubric,
    *,
    reference: tuple[Path, str] | None = None,
    threshold: float | None = None,
) -> ClassResults:
    """Join shard folders into ``out``. Raises ``MergeError`` when shards are missing, doubled,
    overlap, or were graded with other rubrics."""
    manifests = [(folder, _read_manifest(folder)) for folder in folders]

    def position(manifest: Mapping[str, Any]) -> tuple[int, int]:
        index, count = manifest["shard"] or (1, 1)
        return int(index), int(count)

    counts = {position(m)[1] for _, m in manifests}
    if len(counts) != 1:
        raise MergeError(f"the folders come from different shard counts ({sorted(counts)}).")
    count = counts.pop()
    seen: dict[int, Path] = {}
    for folder, manifest in manifests:
        index = position(manifest)[0]
        if index in seen:
            raise MergeError(f"{seen[index]} and {folder} are both shard {index}/{count}.")
        seen[index] = folder
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        shown = ", ".join(f"{i}/{count}" for i in missing)
        raise MergeError(f"shard {shown} is missing: grade it, then merge every folder.")
    rubrics = {json.dumps(m["rubric"], sort_keys=True) for _, m in manifests if m["rubric"]}
    if len(rubrics) > 1:
        raise MergeError("the shards were graded with different rubrics: grade them all with one.")
    if rubrics and rubrics != {json.dumps(rubric.to_json(), sort_keys=True)}:
        raise MergeError(
            "the shards were graded with another rubric than this merge's: merge with the "
            "rubric file the shards were graded with."
        )
    order: dict[str, int] = {}
    reports: list[SubmissionReport] = []
    sources: dict[str, str] = {}
    for folder, manifest in manifests:
        for name, index in manifest["order"].items():
            if name in order:
                raise MergeError(f"{name} was graded in two shards: the slices overlap.")
            order[name] = int(index)
            data = json.loads((folder / "reports" / f"{name}.json").read_text())
            reports.append(SubmissionReport.from_json(data, rubric))
            source = folder / "sources" / f"{name}.py"
            if source.is_file():
                sources[name] = source.read_text(encoding="utf-8", errors="replace")
    total = int(manifests[0][1]["total"])
    if len(order) != total:
        raise MergeError(f"the shards graded {len(order)} submissions of a roster of {total}.")
    if any(out.resolve() == folder.resolve() for folder in folders):
        raise MergeError(f"{out} is one of the shard folders: merge into a new folder.")
    recorded = manifests[0][1].get("threshold", DEFAULT_THRESHOLD)
    chosen = float(recorded) if threshold is None else threshold
    return write_results(
        out, reports, sources, order=order, total=total, reference=reference, threshold=chosen
    )


def failures_by_check(reports: Sequence[SubmissionReport]) -> list[tuple[str, int]]:
    """Each check and in-notebook part that some learner failed, and how many learners failed
    it, most first (ties in the order the reports first list them: a grading lists the
    catalogue's checks, then the course's parts). Every report counts, one that could not be
    graded (fully) too: its checks count as grades.csv shows them."""
    failed: Counter[str] = Counter()
    order: dict[str, int] = {}
    for report in reports:
        for result in report.results:
            order.setdefault(result.id, len(order))
        failed.update({r.id for r in report.results if r.status == "failed"})
    return sorted(failed.items(), key=lambda item: (-item[1], order[item[0]]))


def _distribution(reports: Sequence[SubmissionReport]) -> list[int]:
    counts = [0] * BINS
    for report in reports:
        share = report.score / report.max_score if report.max_score else 0.0
        counts[min(BINS - 1, int(share * BINS))] += 1
    return counts


def summary_lines(reports: Sequence[SubmissionReport]) -> list[str]:
    """The class at a glance: scores in tenths of the maximum, how many learners failed each
    check (``failures_by_check``), and how many could not be graded, by kind."""
    if not reports:
        return []
    top = max(r.max_score for r in reports)
    counts = _distribution(reports)
    widest = max(counts) or 1
    lines = ["Scores:"]
    for i, count in enumerate(counts):
        low, high = top * i / BINS, top * (i + 1) / BINS
        bracket = "]" if i == BINS - 1 else ")"
        bar = "#" * round(30 * count / widest)
        lines.append(f"  [{low:>5g}, {high:>5g}{bracket} {count:>4}  {bar}")
    failed = failures_by_check(reports)
    if failed:
        shown = ", ".join(f"{i} {n}" for i, n in failed)
        lines += textwrap.wrap(
            f"Failed, by check (learners of {len(reports)}): {shown}",
            width=100,
            subsequent_indent="  ",
            break_on_hyphens=False,
        )
    else:
        lines.append(f"No check failed (learners: {len(reports)}).")
    problems = Counter(r.problem.kind for r in reports if r.problem is not None)
    if problems:
        shown = ", ".join(f"{kind} {n}" for kind, n in problems.most_common())
        lines.append(
            f"Could not be graded: {sum(problems.values())} ({shown}); the checks they did not "
            "run count as failed above, as in grades.csv"
        )
    return lines


def summary_chart(reports: Sequence[SubmissionReport], path: Path) -> None:
    """Two bar charts in one PNG: the score distribution and failures per check.

    Drawn on a bare ``Figure``, which needs no pyplot and no backend (``savefig`` picks the
    PNG writer), so grading changes no process-wide matplotlib state; imported here, so the
    commands that draw nothing do not load matplotlib."""
    from matplotlib.figure import Figure

    counts = _distribution(reports)
    top = max(r.max_score for r in reports)
    failed = dict(failures_by_check(reports))
    shown = [*CHECK_IDS, *(i for i in failed if i not in CHECK_IDS)][::-1]
    figure = Figure(figsize=(11, 4))
    scores, checks = figure.subplots(1, 2)
    labels = [f"{top * i / BINS:g}" for i in range(BINS)]
    scores.bar(labels, counts, color="#4c72b0")
    scores.set_xlabel(f"score (from; bins of {top / BINS:g})")
    scores.set_ylabel("submissions")
    scores.set_title(f"Scores of {len(reports)} submissions")
    checks.barh(shown, [failed.get(i, 0) for i in shown], color="#c44e52")
    checks.set_xlabel("learners who failed it")
    checks.set_title("Failures per check")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
