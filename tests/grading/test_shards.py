"""A class graded in shards on several machines and merged is the class graded in one run:
the slices are disjoint and cover the roster, and the merged grades.csv is the unsharded one,
verdict for verdict, similarity included."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from grading_support import REFERENCE, write_variant

from labkit.checks import CheckResult
from labkit.cli import main
from labkit.grading.class_results import (
    MergeError,
    failures_by_check,
    merge,
    parse_shard,
    summary_lines,
)
from labkit.grading.report import Problem, SubmissionReport
from labkit.grading.roster import find_submissions
from labkit.grading.rubric import Rubric

ONLY = ["trickle", "usage", "upstream_status"]


def _roster(tmp_path: Path) -> Path:
    roster = tmp_path / "roster"
    roster.mkdir()
    shutil.copy(REFERENCE, roster / "ana.py")
    write_variant("no_usage", tmp_path)
    shutil.copy(tmp_path / "no_usage.py", roster / "ben.py")
    (roster / "cleo.py").write_text("def broken(:\n")
    shutil.copy(REFERENCE, roster / "dev.py")  # a copy of ana's: similarity must see it merged
    write_variant("status_as_200", tmp_path)
    shutil.copy(tmp_path / "status_as_200.py", roster / "eve.py")
    return roster


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "grades.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_shards_are_disjoint_and_cover_the_roster_in_a_stable_order(tmp_path: Path) -> None:
    for name in ("b.py", "a.py", "e.py", "c.py", "d.py"):
        (tmp_path / name).write_text("")
    roster = find_submissions([tmp_path])
    slices = [parse_shard(f"{k}/3").take(roster) for k in (1, 2, 3)]
    taken = [s.learner for part in slices for s in part]
    assert sorted(taken) == ["a", "b", "c", "d", "e"] and len(set(taken)) == 5
    assert [s.learner for s in slices[0]] == ["a", "d"]


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_bad_shard_says_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not K/N with 1 <= K <= N, e.g. 1/4 for the"):
        parse_shard(text)


@pytest.mark.slow
@pytest.mark.sockets
def test_merged_shards_equal_the_unsharded_grades(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roster = _roster(tmp_path)
    common = ["grade-class", str(roster), "--reference", str(REFERENCE), "--only", *ONLY]
    assert main([*common, "--out", str(tmp_path / "all")]) == 1
    for k in (1, 2):
        assert main([*common, "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}")]) == 1
    shards = [_rows(tmp_path / f"s{k}") for k in (1, 2)]
    names = [{r["learner"] for r in rows} for rows in shards]
    assert names[0].isdisjoint(names[1]) and len(names[0] | names[1]) == 5
    assert all(r["similarity"] == "" for rows in shards for r in rows)  # measured when merged
    capsys.readouterr()
    merged = tmp_path / "merged"
    argv = ["merge", str(tmp_path / "s2"), str(tmp_path / "s1"), "--out", str(merged)]
    assert main([*argv, "--reference", str(REFERENCE)]) == 1
    shown = capsys.readouterr().out
    assert _rows(merged) == _rows(tmp_path / "all")
    dev = next(r for r in _rows(merged) if r["learner"] == "dev")
    assert dev["most_similar_learner"] == "ana" and dev["similarity_flag"]
    feedback = sorted(p.name for p in (merged / "feedback").iterdir())
    assert feedback == sorted(p.name for p in (tmp_path / "all" / "feedback").iterdir())
    assert "summary.png" in feedback
    assert "Failed, by check (learners of 5): usage 2, upstream_status 2, trickle 1" in shown
    assert "Could not be graded: 1 (syntax_error 1); the checks they did not run" in shown
    with pytest.raises(MergeError, match=r"shard 2/2 is missing"):
        merge([tmp_path / "s1"], tmp_path / "half", Rubric())
    with pytest.raises(MergeError, match=r"are both shard 1/2"):
        merge([tmp_path / "s1", tmp_path / "s1"], tmp_path / "twice", Rubric())
    with pytest.raises(MergeError, match=r"merge with the rubric file the shards were graded"):
        merge([tmp_path / "s1", tmp_path / "s2"], tmp_path / "other", Rubric(max_score=10))


def test_merging_a_folder_that_is_not_a_roster_run_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(MergeError, match=r"has no roster\.json: it holds no graded shard"):
        merge([tmp_path], tmp_path / "out", Rubric())
    (tmp_path / "roster.json").write_text(json.dumps({"shard": [1, 1]}) + "{")
    with pytest.raises(MergeError, match="is not valid JSON"):
        merge([tmp_path], tmp_path / "out", Rubric())


def test_the_summary_shows_the_score_distribution_and_how_many_failed_each_check() -> None:
    def report(name: str, passed: bool) -> SubmissionReport:
        results = [
            CheckResult("trickle", True, "ok"),
            CheckResult("cancel", passed, "ok" if passed else "went on", {}, "cancel"),
        ]
        return SubmissionReport(name, f"{name}.py", results, Rubric())

    lines = summary_lines([report("a", True), report("b", False), report("c", False)])
    assert lines[0] == "Scores:"
    assert lines[6].split()[-2:] == ["2", "#" * 30]  # [50, 60): two of three at 50
    assert lines[10].split()[-2:] == ["1", "#" * 15]  # [90, 100]: one at 100
    assert lines[-1] == "Failed, by check (learners of 3): cancel 2"
    assert summary_lines([report("a", True)])[-1] == "No check failed (learners: 1)."


def test_the_summary_counts_every_learner_who_failed_each_check() -> None:
    """Bug: the summary said "No check failed." when checks had failed: it counted only
    ``CHECK_IDS`` (never a notebook part) and only learners whose report had no problem, so a
    class whose proxies all ran out of memory after their checks, or whose notebook parts
    failed, had no failure in it. Fix: every learner, every check and part."""
    memory = Problem("memory_limit", "the proxy was stopped: it held more than 256 MiB")
    reports = [
        SubmissionReport(
            "ana", "ana.py", [CheckResult("cancel", False, "went on")], Rubric(), memory
        ),
        SubmissionReport(
            "ben",
            "ben/proxy.py",
            [CheckResult("cancel", False, "went on"), CheckResult("nb08.adapter", False, "no")],
            Rubric(),
        ),
        _with_parts("cleo", adapter=True),
    ]
    assert failures_by_check(reports) == [
        ("cancel", 2),
        ("nb08.adapter", 1),
        ("nb03.should_compress", 1),
    ]
    lines = summary_lines(reports)
    assert lines[-2:] == [
        "Failed, by check (learners of 3): cancel 2, nb08.adapter 1, nb03.should_compress 1",
        "Could not be graded: 1 (memory_limit 1); the checks they did not run count as failed "
        "above, as in grades.csv",
    ]
    assert "No check failed" not in "\n".join(lines)


def _with_parts(name: str, adapter: bool) -> SubmissionReport:
    results = [
        CheckResult("trickle", True, "ok"),
        CheckResult("nb03.compress_and_flush", True, "ok"),
        CheckResult("nb03.should_compress", False, "not written yet: should_compress"),
        CheckResult("nb08.adapter", adapter, "ok" if adapter else "wrong text"),
    ]
    return SubmissionReport(name, f"{name}/proxy.py", results, Rubric())


def test_grades_csv_has_a_column_per_notebook_part_in_course_order_and_merge_keeps_them(
    tmp_path: Path,
) -> None:
    from labkit.grading.class_results import Shard, write_results

    reports = {"ana": _with_parts("ana", True), "ben": _with_parts("ben", False)}
    # bob handed in proxy.py alone, graded in a roster without notebooks: its parts stay blank
    reports["bob"] = SubmissionReport(
        "bob", "bob.py", [CheckResult("trickle", True, "ok")], Rubric()
    )
    order = {"ana": 0, "ben": 1, "bob": 2}
    for k, names in ((1, ["ana", "bob"]), (2, ["ben"])):
        write_results(
            tmp_path / f"s{k}",
            [reports[n] for n in names],
            {},
            order=order,
            total=3,
            shard=Shard(k, 2),
        )
    merged = tmp_path / "merged"
    merge([tmp_path / "s1", tmp_path / "s2"], merged, Rubric())
    with open(merged / "grades.csv", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    parts = ["nb03.compress_and_flush", "nb03.should_compress", "nb08.adapter"]
    at = header.index("problem")
    assert header[at - len(parts) : at] == parts
    rows = {r["learner"]: r for r in _rows(merged)}
    assert [rows["ana"][p] for p in parts] == ["passed", "failed", "passed"]
    assert [rows["ben"][p] for p in parts] == ["passed", "failed", "failed"]
    assert [rows["bob"][p] for p in parts] == ["", "", ""]
    assert rows["ana"]["trickle"] == "passed"
    # a shard without notebook parts writes no part columns
    proxy_only = tmp_path / "proxy_only"
    write_results(proxy_only, [reports["bob"]], {}, order={"bob": 0}, total=1)
    with open(proxy_only / "grades.csv", encoding="utf-8") as handle:
        assert not [name for name in next(csv.reader(handle)) if name.startswith("nb")]
