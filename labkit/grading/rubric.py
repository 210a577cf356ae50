"""How much each check is worth, and the time limits: the rubric, read from TOML.

Every key is optional; an empty file (or no file) gives the defaults::

    max_score = 100            # what a submission that passes every check gets (whole cents)
    submission_timeout_s = 90  # wall-time limit for grading one submission, at one CPU or more
    inconclusive = "leave_out"  # or "award": what a check the machine could not decide is worth

    [weights]                  # relative weights; a check not listed weighs 1; 0 leaves it out
    trickle = 2
    cancel = 2

The in-notebook parts (``labkit.grading.notebook_parts``: ids like ``nb08.adapter``), when a
grading includes them, share ``notebook_share`` of ``max_score`` and the ``proxy.py`` checks the
rest; within each share, the weights split it as above::

    notebook_share = 0.25      # the default: proxy.py 75 points, the notebook parts 25
    [notebook_weights]         # a part not listed weighs 1; 0 leaves it out
    nb08.adapter = 2           # TOML reads this as a table nb08 holding adapter = 2: both work

The default is a quarter because ``proxy.py`` is the lab's deliverable, the one thing a learner
hands in that runs (DESIGN: the submission contract), while the notebook parts are the exercises
on the way to it; three of the graded notebooks (11, 12, 13) run ``proxy.py`` again in
their checks. A quarter makes every part count without letting the exercises outweigh the
proxy. A grading without notebook parts (``labkit grade proxy.py``) gives the checks all of
``max_score``, as before, and one of the parts alone gives them all of it.

A check that is skipped (``usage`` when grading a URL) is left out of that submission's total,
so its score is still out of ``max_score``. So is an *inconclusive* one (the grader's machine
was too slow to decide it, see ``labkit.checks.result``) unless ``inconclusive = "award"``
gives it full points, for an instructor who prefers every submission out of the same total.
Neither ever costs the learner a point.

Below one CPU the time limit stretches with every other time budget of the grading (its
``labkit.checks.machine.Budget``: twice as long at half a CPU), so a slow container is not
mistaken for a proxy that hangs.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.checks import CHECK_IDS
from labkit.checks.catalogue import ALL_IDS, BY_ID
from labkit.checks.machine import Budget
from labkit.errors import RubricError

__all__ = [
    "CENT",
    "DEFAULT_MAX_SCORE",
    "DEFAULT_NOTEBOOK_SHARE",
    "DEFAULT_SUBMISSION_TIMEOUT_S",
    "Rubric",
    "RubricError",
    "is_part_id",
]


def is_part_id(check_id: str) -> bool:
    """Whether ``check_id`` names an in-notebook part (``nb08.adapter``), not a proxy check."""
    return bool(_PART_ID.match(check_id))


DEFAULT_MAX_SCORE = 100.0
DEFAULT_SUBMISSION_TIMEOUT_S = 90.0
DEFAULT_NOTEBOOK_SHARE = 0.25
CENT = 0.01  # the smallest part of a point a platform shows (Rubric.allot)
START_MARGIN_S = 30.0  # starting the proxy and the mocks, beside the longest check
_TOP_KEYS = (
    "max_score",
    "submission_timeout_s",
    "inconclusive",
    "weights",
    "notebook_share",
    "notebook_weights",
)
_PART_ID = re.compile(r"^nb\d\d\.\w+$")
INCONCLUSIVE_POLICIES = ("leave_out", "award")


@dataclass(frozen=True)
class Rubric:
    max_score: float = DEFAULT_MAX_SCORE
    submission_timeout_s: float = DEFAULT_SUBMISSION_TIMEOUT_S
    weights: Mapping[str, float] = field(default_factory=dict)
    inconclusive: str = "leave_out"
    notebook_share: float = DEFAULT_NOTEBOOK_SHARE
    notebook_weights: Mapping[str, float] = field(default_factory=dict)

    @property
    def awards_inconclusive(self) -> bool:
        return self.inconclusive == "award"

    def time_limit_s(
        self, ids: Iterable[str] = (), *, budget: Budget, engine: bool = False
    ) -> float:
        """``submission_timeout_s`` on the grading's machine (``budget``, the caller's): stretched
        below one CPU, and never shorter than the longest of the
        checks ``ids`` (``minute_stream`` alone takes 67 s) plus ``START_MARGIN_S`` for starting
        the proxy. On a real engine (``engine``) the checks run one after another, so never
        shorter than all their engine budgets together."""
        checks = [BY_ID[i] for i in ids]
        if engine:
            needed = sum(check.engine_budget_s for check in checks)
        else:
            needed = max((check.budget_s for check in checks), default=0.0)
        return budget.stretch(max(self.submission_timeout_s, needed + START_MARGIN_S))

    def weight(self, check_id: str) -> float:
        if is_part_id(check_id):
            return float(self.notebook_weights.get(check_id, 1.0))
        return float(self.weights.get(check_id, 1.0))

    def points(self, counted: list[str]) -> dict[str, float]:
        """Points available for each counted check, summing to ``max_score``: the notebook
        parts among them share ``notebook_share`` of it when there are proxy checks too."""
        parts = [i for i in counted if is_part_id(i)]
        checks = [i for i in counted if not is_part_id(i)]
        if not parts or not checks:
            return self._split(counted, self.max_score)
        shared = self._split(parts, self.max_score * self.notebook_share)
        return {
            **self._split(checks, self.max_score - self.max_score * self.notebook_share),
            **shared,
        }

    def _split(self, ids: Sequence[str], total_points: float) -> dict[str, float]:
        total = sum(self.weight(i) for i in ids)
        if total <= 0:
            return dict.fromkeys(ids, 0.0)
        return {i: total_points * self.weight(i) / total for i in ids}

    def allot(self, counted: Sequence[str], *, unit: float = CENT) -> dict[str, float]:
        """``points`` in whole ``unit``s that add up to exactly ``max_score``, for a platform
        that shows each check's points beside the total (Gradescope: cents; GitHub Classroom:
        whole points). Each check gets its share rounded down; the units left over go one each
        to the largest remainders, ties to the check listed first. Raises ``ValueError`` when
        ``max_score`` is not a whole number of ``unit``s."""
        units = round(self.max_score / unit)
        if not _whole_units(self.max_score, unit):
            raise ValueError(f"max_score = {self.max_score:g} is not a whole number of {unit:g}")
        exact = {i: share / unit for i, share in self.points(list(counted)).items()}
        given = {i: math.floor(value + 1e-9) for i, value in exact.items()}
        left = units - sum(given.values()) if exact else 0
        order = sorted(exact, key=lambda i: (-(exact[i] - given[i]), list(counted).index(i)))
        for check_id in order[:left]:
            given[check_id] += 1
        return {i: round(given[i] * unit, 2) for i in counted}

    def to_json(self) -> dict[str, Any]:
        return {
            "max_score": self.max_score,
            "submission_timeout_s": self.submission_timeout_s,
            "inconclusive": self.inconclusive,
            "weights": {i: self.weight(i) for i in CHECK_IDS},
            "notebook_share": self.notebook_share,
            "notebook_weights": dict(self.notebook_weights),
        }

    def to_toml(self) -> str:
        """This rubric as a TOML file that ``load`` reads back to an equal rubric."""
        lines = [
            f"max_score = {self.max_score:g}",
            f"submission_timeout_s = {self.submission_timeout_s:g}",
            f'inconclusive = "{self.inconclusive}"',
            "",
            "[weights]",
            *(f"{i} = {self.weight(i):g}" for i in CHECK_IDS),
        ]
        if self.notebook_share != DEFAULT_NOTEBOOK_SHARE:
            lines.insert(3, f"notebook_share = {self.notebook_share:g}")
        if self.notebook_weights:
            lines += ["", "[notebook_weights]"]
            lines += [f"{i} = {w:g}" for i, w in self.notebook_weights.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def load(cls, path: str | Path | None) -> Rubric:
        """The rubric in ``path`` (TOML), or the defaults for None. Raises ``RubricError``."""
        if path is None:
            return cls()
        shown = str(path)
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RubricError(shown, "there is no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RubricError(shown, f"it could not be read ({exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise RubricError(shown, f"it is not valid TOML ({exc})") from None
        return cls.from_mapping(data, path=shown)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, path: str = "<rubric>") -> Rubric:
        unknown = sorted(set(data) - set(_TOP_KEYS))
        if unknown:
            raise RubricError(path, f"unknown key {unknown[0]!r}; expected {', '.join(_TOP_KEYS)}")
        weights = data.get("weights", {})
        if not isinstance(weights, Mapping):
            raise RubricError(path, "[weights] must be a table of check id = number")
        for key, value in weights.items():
            if key not in ALL_IDS:
                raise RubricError(
                    path, f"unknown check {key!r} in [weights]; expected {', '.join(ALL_IDS)}"
                )
            _number(path, f"weights.{key}", value)
        notebook_weights = _part_weights(path, data.get("notebook_weights", {}))
        share = _number(path, "notebook_share", data.get("notebook_share", DEFAULT_NOTEBOOK_SHARE))
        if share > 1:
            raise RubricError(path, f"notebook_share = {share:g} is not valid; expected 0 to 1")
        inconclusive = data.get("inconclusive", "leave_out")
        if inconclusive not in INCONCLUSIVE_POLICIES:
            raise RubricError(
                path,
                f"inconclusive = {inconclusive!r} is not valid; expected "
                + " or ".join(repr(p) for p in INCONCLUSIVE_POLICIES),
            )
        max_score = _number(path, "max_score", data.get("max_score", DEFAULT_MAX_SCORE))
        if not _whole_units(max_score, CENT):  # what allot needs to show each check's points
            raise RubricError(
                path,
                f"max_score = {data['max_score']!r} is not valid; expected a number of points in "
                f"whole cents (each check's points are shown to {CENT:g}), such as 100 or 99.5",
            )
        return cls(
            max_score=max_score,
            submission_timeout_s=_number(
                path,
                "submission_timeout_s",
                data.get("submission_timeout_s", DEFAULT_SUBMISSION_TIMEOUT_S),
                positive=True,
            ),
            weights={k: float(v) for k, v in weights.items()},
            inconclusive=str(inconclusive),
            notebook_share=share,
            notebook_weights=notebook_weights,
        )


def _whole_units(value: float, unit: float) -> bool:
    """Whether ``value`` is a whole number of ``unit``s, as far as a float can say: 99.5 is
    whole cents, 99.999 is not. ``Rubric.allot`` needs it of ``max_score``, ``Rubric.load``
    checks it for cents (Gradescope's unit) when it reads the file."""
    return math.isclose(round(value / unit) * unit, value, abs_tol=1e-9)


def _part_weights(path: str, table: object, prefix: str = "") -> dict[str, float]:
    """``[notebook_weights]`` flattened: TOML reads ``nb08.adapter = 2`` as a nested table."""
    if not isinstance(table, Mapping):
        raise RubricError(path, "[notebook_weights] must be a table of part id = number")
    found: dict[str, float] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found |= _part_weights(path, value, f"{name}.")
            continue
        if not is_part_id(name):
            raise RubricError(
                path,
                f"unknown part {name!r} in [notebook_weights]; expected ids like nb08.adapter "
                "(the notebook's number and its check's name)",
            )
        found[name] = _number(path, f"notebook_weights.{name}", value)
    return found


def _number(path: str, key: str, value: object, *, positive: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and math.isfinite(float(value)) and float(value) >= 0:  # type: ignore[arg-type]
        if not positive or float(value) > 0:  # type: ignore[arg-type]
            return float(value)  # type: ignore[arg-type]
    wanted = "a number > 0" if positive else "a number >= 0"
    raise RubricError(path, f"{key} = {value!r} is not valid; expected {wanted}")
