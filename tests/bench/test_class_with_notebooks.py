"""The class bench's rosters are what the grader reads as a class with and without notebooks."""

from __future__ import annotations

from pathlib import Path

from bench.class_with_notebooks import roster
from labkit.grading.roster import find_submissions


def test_the_with_notebooks_roster_is_learners_with_proxy_and_notebooks(tmp_path: Path) -> None:
    submissions = find_submissions([roster(tmp_path / "with", 3, notebooks=True)])
    assert [s.learner for s in submissions] == ["learner-000", "learner-001", "learner-002"]
    for submission in submissions:
        assert submission.parts and submission.notebooks is not None
        assert sorted(submission.notebooks.glob("*.ipynb")), submission
        assert not list(submission.notebooks.glob("*.py"))  # the notebooks only


def test_the_proxy_only_roster_is_proxy_files_alone(tmp_path: Path) -> None:
    submissions = find_submissions([roster(tmp_path / "alone", 2, notebooks=False)])
    assert len(submissions) == 2
    assert all(s.path.suffix == ".py" and s.notebooks is None for s in submissions)
