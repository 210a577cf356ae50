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
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Final

from labkit.wire import says_something

Validator = Callable[[str], bool]

#: The stand-in check rejects any sentence that mentions one of these words.
BANNED: Final = ("password",)
_SENTENCE_END: Final = re.compile(r"[.!?]+")


def validate(sentence: str) -> bool:
    """Stand-in for a real check: a sentence passes unless it names a banned word."""
    return not any(word in sentence.lower() for word in BANNED)


def sentences(text: str) -> tuple[list[str], str]:
    """Cut ``text`` after each sentence end: (complete sentences, the rest). A "sentence"
    with nothing to read in it (filler) is joined to the one after it."""
    done: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if end.end() == len(text) and text.endswith("."):  # "..." may still be growing
            break
        if says_something(text[start : end.end()]):
            done.append(text[start : end.end()])
            start = end.end()
    return done, text[start:]


class BySentence:
    """Hold text until a sentence is complete and valid; a rejected sentence stops it all."""

    name: ClassVar[str] = "by_sentence"

    def __init__(self, validator: Validator = validate) -> None:
        self.validator = validator
        self.held = ""
        self.rejected = False
        self.withheld = ""

    def _release(self, complete: list[str]) -> list[str]:
        out: list[str] = []
        for number, sentence in enumerate(complete):
            if not self.validator(sentence):
                self.rejected = True
                self.withheld = "".join(complete[number:]) + self.held
                self.held = ""
                break
            out.append(sentence)
        return out

    def feed(self, text: str) -> list[str]:
        if self.rejected:
            self.withheld += text
            return []
        complete, self.held = sentences(self.held + text)
        return self._release(complete)

    def finish(self) -> list[str]:
        if self.rejected or not self.held:
            return []
        rest, self.held = self.held, ""
        return self._release([rest])


class WholeAnswer:
    """Hold everything; at the end, validate every sentence and release all or nothing."""

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
        complete, rest = sentences(self.held)
        if not all(self.validator(s) for s in [*complete, rest] if s):
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
