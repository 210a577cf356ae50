"""What a check returns: pass or fail, one deterministic line, the numbers behind it, a hint.

The verdict is what notebooks print and nbval compares, so it never contains a measured number
(or any digit at all); the numbers go in ``evidence``. The hint names the notebook step that
teaches the fix. A *warning* is a second line of the same kind (deterministic, no digits) that
says what else was seen, for a passed check too: ``trickle`` passes a proxy that batches its
sends, and warns that it batches them. Reports show it under the verdict; it changes no score.

A check that could not decide because the machine was too slow to run its experiment (not
because of anything the proxy did) is *inconclusive*: a skipped result whose evidence holds the
measured reason under ``INCONCLUSIVE`` (``"inconclusive"``). Like any skipped check it is left
out of the score, so it never costs a point; unlike ``usage`` without a log it says why, and its
verdict starts with ``inconclusive:``. It stays ``status == "skipped"`` on the wire so that a
report read back from JSON keeps it out of the score too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["INCONCLUSIVE", "MARKS", "CheckResult", "Evidence", "ResultKind", "Status"]

Evidence = Mapping[str, float | int | str | bool | None]
Status = Literal["passed", "failed", "skipped"]
ResultKind = Literal["passed", "failed", "skipped", "inconclusive"]

# How each outcome is marked (``__str__`` marks by status: SKIP for an inconclusive one too)
MARKS: Mapping[ResultKind, str] = {
    "passed": "PASS",
    "failed": "FAIL",
    "skipped": "SKIP",
    "inconclusive": "????",
}
INCONCLUSIVE = "inconclusive"  # the evidence key holding an inconclusive result's reason


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check against one proxy.

    ``passed`` is False for a skipped check too; ``skipped`` says it was not run (for example
    ``usage`` without a usage log), and graders leave it out of the score. ``inconclusive``
    is a skipped result that ran but could not decide (see the module docstring).
    """

    id: str
    passed: bool
    verdict: str
    evidence: Evidence = field(default_factory=dict)
    hint: str = ""
    skipped: bool = False
    warning: str = ""  # what else was seen, whatever the outcome (no digits, like the verdict)

    @property
    def inconclusive(self) -> bool:
        """Run, but the machine was too slow to decide; the reason is in the evidence."""
        return self.skipped and bool(self.evidence.get(INCONCLUSIVE))

    @property
    def status(self) -> Status:
        if self.skipped:
            return "skipped"
        return "passed" if self.passed else "failed"

    @property
    def outcome(self) -> ResultKind:
        """``status``, with an inconclusive result told apart from a skipped one: what the
        grader's table, feedback and CSV show."""
        return "inconclusive" if self.inconclusive else self.status

    def __str__(self) -> str:
        """One stable line, e.g. ``PASS trickle: tokens reach the client as ...`` (the warning
        is left to the reports: a notebook's printed line stays one line)."""
        return f"{MARKS[self.status]} {self.id}: {self.verdict}"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "status": self.status,
            "passed": self.passed,
            "verdict": self.verdict,
            "evidence": dict(self.evidence),
            "hint": self.hint,
            "warning": self.warning,
        }
