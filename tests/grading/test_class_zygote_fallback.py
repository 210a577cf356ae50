"""A class graded with notebooks falls back to one runner process per learner when the shared,
pre-imported one cannot start, and says so: the instructor learns why the class is slower."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit.checks.machine import Budget
from labkit.grading import isolation, roster
from labkit.grading.roster import Submission
from labkit.grading.zygote import Zygote


def _class(tmp_path: Path, parts: bool) -> list[Submission]:
    return [Submission(f"learner-{n}", tmp_path / f"{n}.py", parts=parts) for n in range(2)]


def test_a_zygote_that_cannot_start_is_reported_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(isolation, "choose", lambda: SimpleNamespace(kind="bubblewrap"))
    monkeypatch.setattr(Zygote, "start", classmethod(lambda cls, *a: "unshare: not permitted"))
    notes: list[str] = []
    assert roster._zygote(_class(tmp_path, parts=True), Budget(cpus=2), notes.append) is None
    [note] = notes
    assert "(unshare: not permitted)" in note and "through bwrap" in note
    assert "The grades are the same" in note


def test_no_note_where_no_zygote_was_wanted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes: list[str] = []
    monkeypatch.setattr(isolation, "choose", lambda: SimpleNamespace(kind="bubblewrap"))
    assert roster._zygote(_class(tmp_path, parts=False), Budget(cpus=2), notes.append) is None
    monkeypatch.setattr(isolation, "choose", lambda: SimpleNamespace(kind="none"))
    assert roster._zygote(_class(tmp_path, parts=True), Budget(cpus=2), notes.append) is None
    assert notes == []  # no notebooks, or no sandbox to fork into: nothing the instructor lost
