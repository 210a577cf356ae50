"""Rubric files: defaults, weights, and errors that say which key to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.checks import CHECK_IDS
from labkit.grading.rubric import Rubric, RubricError


def test_without_a_file_every_check_is_worth_the_same() -> None:
    rubric = Rubric.load(None)
    points = rubric.points(list(CHECK_IDS))
    assert points == dict.fromkeys(CHECK_IDS, 100.0 / len(CHECK_IDS))
    assert rubric.submission_timeout_s == 90.0


def test_weights_share_out_max_score_over_the_counted_checks(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text("max_score = 20\n[weights]\ntrickle = 3\nusage = 0\n")
    rubric = Rubric.load(path)
    points = rubric.points(["trickle", "cancel", "usage"])
    assert points == {"trickle": 15.0, "cancel": 5.0, "usage": 0.0}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "max_scor = 10\n",
            "unknown key 'max_scor'; expected max_score, submission_timeout_s, inconclusive, "
            "weights",
        ),
        ("[weights]\ntrikle = 1\n", "unknown check 'trikle' in [weights]; expected trickle, "),
        ("[weights]\ncancel = -1\n", "weights.cancel = -1 is not valid; expected a number >= 0"),
        (
            "submission_timeout_s = 0\n",
            "submission_timeout_s = 0 is not valid; expected a number > 0",
        ),
        ("max_score = \n", "it is not valid TOML"),
    ],
)
def test_a_bad_rubric_names_the_key_and_what_to_write(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    with pytest.raises(RubricError) as error:
        Rubric.load(path)
    assert str(error.value).startswith(f"Rubric {path}: {problem}")
    assert str(error.value).endswith("Fix the file.")  # the CLI adds: or leave --rubric out


def test_a_missing_rubric_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(RubricError, match="there is no such file"):
        Rubric.load(tmp_path / "nope.toml")


def test_a_max_score_in_fractions_of_a_cent_is_refused_when_the_file_is_read(
    tmp_path: Path,
) -> None:
    """Bug: ``Rubric.load`` accepted ``max_score = 99.999``, and ``labkit grade --gradescope``
    graded the proxy, then stopped with a ``ValueError`` traceback from ``Rubric.allot`` (which
    shows each check's points in whole cents). Fix: ``load`` checks what ``allot`` needs, and
    says which file and which value."""
    path = tmp_path / "rubric.toml"
    path.write_text("max_score = 99.999\n")
    with pytest.raises(RubricError) as error:
        Rubric.load(path)
    assert str(error.value) == (
        f"Rubric {path}: max_score = 99.999 is not valid; expected a number of points in whole "
        "cents (each check's points are shown to 0.01), such as 100 or 99.5. Fix the file."
    )


@pytest.mark.parametrize("max_score", ["100", "99.5", "12.34", "0", "1e3"])
def test_every_max_score_the_file_accepts_can_be_allotted_in_cents(
    tmp_path: Path, max_score: str
) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(f"max_score = {max_score}\n")
    rubric = Rubric.load(path)
    allotted = rubric.allot(list(CHECK_IDS))
    assert round(sum(allotted.values()), 2) == float(max_score)
