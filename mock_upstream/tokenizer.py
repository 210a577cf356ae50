"""The one tokenizer the mock uses, for the text it writes and for every usage count.

A token is, in the style of GPT-2's pre-tokenizer:

* a run of letters with at most one leading space (``" proxy"``),
* a run of one to three digits with at most one leading space (``" 202"``, ``"6"``),
* a run of punctuation with at most one leading space (``"."``, ``" {\\""``),
* a run of underscores,
* a run of newlines (``"\n\n"`` between paragraphs is one token),
* a run of other whitespace (a run before a word leaves its last space to the word).

Joining the tokens gives back the text exactly. ``count_tokens(a + b)`` is close to, but
not always equal to, ``count_tokens(a) + count_tokens(b)``; for the mock's own answers it
is exact at every chunk boundary, so a client can count the tokens received so far by
counting the text received so far.
"""

from __future__ import annotations

import re
from typing import Final

_PATTERN: Final = re.compile(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|_+|\n+|[^\S\n]+(?!\S)|[^\S\n]+")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into tokens; ``"".join(tokenize(text)) == text``."""
    return _PATTERN.findall(text)


def count_tokens(text: str) -> int:
    """The number of tokens in ``text``."""
    return len(tokenize(text))
