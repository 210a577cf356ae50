"""The gateway's two policies: what the reader may see (release), and when to ask again
(restart).

A release policy is the lesson of notebook 12 (``solutions/release.py``'s ``BySentence`` and
``WholeAnswer``); the gateway takes a class of them and makes one validation buffer per upstream
attempt. :class:`Immediate` is the default, which holds nothing back. :class:`RestartPolicy`
decides, for one failed attempt, whether a fresh upstream request may still give the reader a
whole answer. Both are pure: no I/O, no server, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

#: Reasons after which a fresh upstream request may give the reader a whole answer.
RESTARTABLE: Final = frozenset({"upstream_error", "upstream_dropped", "upstream_status"})


class ReleasePolicy(Protocol):
    """One answer's validation buffer: what may be shown, fragment by fragment."""

    rejected: bool  #: a fragment failed validation: release nothing more
    withheld: str  #: text held back and never released (so far)

    def feed(self, text: str) -> list[str]:
        """Take the next fragment of the upstream's text; return what may be shown now."""
        ...

    def finish(self) -> list[str]:
        """The upstream's terminal event came: return what may still be shown."""
        ...


class Immediate:
    """The policy that holds nothing back: every fragment as it comes, nothing validated."""

    name: ClassVar[str] = "immediate"

    def __init__(self) -> None:
        self.rejected = False
        self.withheld = ""

    def feed(self, text: str) -> list[str]:
        return [text] if text else []

    def finish(self) -> list[str]:
        return []


@dataclass(frozen=True)
class RestartPolicy:
    """When the gateway may start the generation again after the upstream failed.

    Only while nothing has been released (the reader has seen nothing, so a new answer is
    not glued to a different old one), only for failures of the upstream's transport or
    service (a refusal or a rejected sentence is an answer, not a failure), and at most
    ``max_attempts`` upstream requests in all."""

    max_attempts: int = 2

    def decide(self, reason: str, released_chars: int, attempt: int) -> tuple[bool, str]:
        """(restart?, why) for one failed attempt."""
        if reason not in RESTARTABLE:
            return False, f"{reason} is an answer, not a failure: asking again is the user's call"
        if released_chars:
            return (
                False,
                f"{released_chars} characters were already shown: "
                "a new answer would not continue them",
            )
        if attempt >= self.max_attempts:
            return False, f"{attempt} of {self.max_attempts} attempts used"
        return True, "nothing was shown yet"

    def describe(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "only_before_release": True}


#: The restart policy a gateway runs unless given another: two upstream requests at most.
DEFAULT_RESTART: Final = RestartPolicy()
