"""Release policies: what a stream gateway lets the reader see, and when (notebook 12).

Each is a class that ``labkit.make_stream_gateway(..., release=...)`` calls once per answer
for a fresh validation buffer; :class:`Checked` binds a policy to another validator.

Once text is on the reader's screen no later check can take it back, so the gateway decides
*before* it streams: every fragment of the answer goes into the policy's validation buffer,
and only what the policy releases is sent on.

* ``immediate`` (``labkit.stream_gateway.Immediate``, the gateway's default): each fragment as
  it comes; fastest, and nothing can be withheld.
* ``by_sentence``: a sentence is released once it is complete (it ends in ``.``, ``!`` or
  ``?``) and ``validator`` accepts it. Blank filler (a sentence of dots and newlines) is not
  released on its own: it waits for the sentence that follows it. A sentence the validator
  rejects is never sent, and the answer is *rejected*: what was released before it stays
  shown, nothing after it follows.
* ``whole_answer``: nothing until the upstream's terminal event, then every sentence is
  validated and the answer released at once, or not at all.

``finish()`` runs at the upstream's terminal event, and releases what was still held (the
end of the last sentence, or the whole answer); a stream that ends any other way releases
nothing more. ``validate`` is a stand-in for a real check (moderation, PII, a fact check).

``validate`` and ``BySentence`` are notebook 12's build-it, the same code;
``tests/notebooks/test_build_its_match_solutions.py`` keeps them so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

Validator = Callable[[str], bool]


def validate(sentence: str) -> bool:
    """Stand-in for a real check (moderation, PII, a fact check): reject one banned word."""
    return "password" not in sentence.lower()


class BySentence:
    """One answer's validation buffer: a sentence is released once it is complete and valid."""

    name: ClassVar[str] = "by_sentence"

    def __init__(self, validator: Validator = validate) -> None:
        self.validator = validator
        self.held = ""  # text not released yet
        self.rejected = False  # a sentence failed the validator: release nothing more
        self.withheld = ""  # text that will never be shown

    def feed(self, text: str) -> list[str]:
        """Take the next fragment; return the sentences that may be shown now."""
        if self.rejected:
            self.withheld += text
            return []
        out: list[str] = []
        self.held += text
        for end in re.finditer(r"[.!?]+", self.held):
            if end.end() == len(self.held) and self.held.endswith("."):
                break  # "..." may still be growing
            sentence = self.held[: end.end()]
            if not any(c.isalnum() for c in sentence):
                continue  # filler: wait for the sentence after it
            if not self.validator(sentence):
                self.rejected, self.withheld, self.held = True, self.held, ""
                return out
            out.append(sentence)
            self.held = self.held[end.end() :]
            return out + self.feed("")  # the rest may hold another whole sentence
        return out

    def finish(self) -> list[str]:
        """The upstream ended normally: release what is still held, if it is valid."""
        rest, self.held = self.held, ""
        if self.rejected or not rest:
            return []
        if not self.validator(rest):
            self.rejected, self.withheld = True, rest
            return []
        return [rest]


class WholeAnswer:
    """Hold everything; at the end, validate every sentence (as :class:`BySentence` cuts them)
    and release all or nothing."""

    name: ClassVar[str] = "whole_answer"

    def __init__(self, validator: Validator = validate) -> None:
        self.validator = validator
        self.held = ""
        self.rejected = False
        self.withheld = ""

    def feed(self, text: str) -> list[str]:
        self.held += text
        return []

    def finish(self) -> list[str]:
        check = BySentence(self.validator)
        check.feed(self.held)
        check.finish()
        if check.rejected:
            self.rejected, self.withheld = True, self.held
            return []
        return [self.held] if self.held else []


@dataclass(frozen=True)
class Checked:
    """A policy class bound to another validator: ``release=Checked(BySentence, my_check)``."""

    policy: type[BySentence] | type[WholeAnswer]
    validator: Validator

    @property
    def name(self) -> str:
        return self.policy.name

    def __call__(self) -> BySentence | WholeAnswer:
        return self.policy(self.validator)
