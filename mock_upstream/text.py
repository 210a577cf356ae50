"""Deterministic, readable prose: the same prompt and seed always give the same words.

Sentences are built from small phrase lists about streaming (so notebook outputs read
pleasantly), chosen by a :class:`random.Random` seeded from a SHA-256 of the seed and the
prompt. Output is a list of tokens from :mod:`mock_upstream.tokenizer`; a shorter completion
of the same request is a prefix of a longer one, except that the last token becomes a full
stop.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import Final

from mock_upstream.tokenizer import tokenize

_SUBJECTS: Final = (
    "the proxy",
    "the client",
    "each token",
    "the upstream",
    "a stream",
    "the server",
    "every chunk",
    "the gateway",
    "the model",
    "a patient reader",
    "the buffer",
    "the connection",
    "the event loop",
    "a heartbeat",
)
_VERBS: Final = (
    "forwards",
    "waits for",
    "carries",
    "measures",
    "flushes",
    "reads",
    "sends",
    "watches",
    "counts",
    "keeps",
    "closes",
    "holds",
    "notices",
    "passes along",
)
_OBJECTS: Final = (
    "the next token",
    "a small chunk",
    "the final usage",
    "every event",
    "the first byte",
    "a quiet heartbeat",
    "the open socket",
    "a clear error",
    "the running total",
    "each new line",
    "the last frame",
    "a short reply",
)
_ENDINGS: Final = (
    "as soon as it arrives",
    "without delay",
    "one step at a time",
    "before the timer runs out",
    "while the reader waits",
    "in a steady rhythm",
    "under heavy load",
    "at the edge of the network",
    "with great care",
    "and then moves on",
    "for the whole request",
    "",
)
_OPENERS: Final = ("", "", "", "Then", "Meanwhile,", "After that,", "Still,", "Of course,")
_SENTENCES_PER_PARAGRAPH: Final = (3, 6)


def rng_for(prompt: str, seed: int, salt: str = "") -> random.Random:
    """A random generator that depends only on ``seed``, ``prompt`` and ``salt``."""
    digest = hashlib.sha256(f"{seed}\x00{salt}\x00{prompt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def sentence(rng: random.Random) -> str:
    """One sentence, capitalised, ending in a full stop, without leading space."""
    words = [
        rng.choice(_OPENERS),
        rng.choice(_SUBJECTS),
        rng.choice(_VERBS),
        rng.choice(_OBJECTS),
        rng.choice(_ENDINGS),
    ]
    text = " ".join(w for w in words if w)
    return text[0].upper() + text[1:] + "."


def phrase(rng: random.Random) -> str:
    """A few words for a string value (tool-call arguments)."""
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"


def _sentences(prompt: str, seed: int) -> Iterator[str]:
    """Sentence after sentence, each with what goes before it (nothing, a space, or a blank line
    when a paragraph of three to six sentences is full); endless."""
    rng = rng_for(prompt, seed)
    paragraph_length = rng.randint(*_SENTENCES_PER_PARAGRAPH)
    in_paragraph = 0
    before = ""
    while True:
        if in_paragraph >= paragraph_length:
            paragraph_length = rng.randint(*_SENTENCES_PER_PARAGRAPH)
            in_paragraph = 0
            before = "\n\n"
        yield before + sentence(rng)
        in_paragraph += 1
        before = " "


def iter_prose_tokens(prompt: str, seed: int, count: int) -> Iterator[str]:
    """:func:`prose_tokens`, made as they are taken: a 400,000-token answer starts at once.

    Every sentence starts and ends on a token boundary of the whole text (it ends in a full
    stop; the space or blank line before it goes with it), so tokenizing it alone gives the
    whole text's tokens, and only the last two sentences are needed to decide the ending."""
    if count <= 0:
        return
    made = 0
    previous: list[str] = []
    for line in _sentences(prompt, seed):
        tokens = tokenize(line)
        if made + len(tokens) < count:
            yield from tokens
            made += len(tokens)
            previous = tokens
            continue
        last = tokens[: count - made]
        ended = [*previous, *last[:-1], "."]
        if tokenize("".join(ended)) == ended:  # the full stop stays a token of its own
            last = ended[len(previous) :]
        yield from last
        return


def prose_tokens(prompt: str, seed: int, count: int) -> list[str]:
    """Exactly ``count`` tokens of prose, ending with a full stop where that keeps the count.

    The result is what :func:`~mock_upstream.tokenizer.tokenize` gives for its own join, so
    usage counted from the text always matches the number of tokens streamed.
    """
    return list(iter_prose_tokens(prompt, seed, count))


#: What ``filler_tokens`` opens an answer with, in turn: blank lines, spaces and ellipses,
#: tokens that reach the client (and count for TTFT) but carry nothing to read.
_FILLER: Final = ("\n", "...", "\n", "  ", "\n", "...")


#: What ``separator_tokens`` opens an answer with, in turn: ellipses between the characters that
#: Python's ``str.splitlines`` ends a line at and SSE does not (only CR, LF and CRLF end an SSE
#: line). An engine that writes JSON as UTF-8 (llama.cpp does) sends them raw inside a ``data:``
#: line; a proxy that splits its upstream with ``str.splitlines`` (httpx's ``aiter_lines`` does)
#: cuts that line in two, and the event is lost.
_SEPARATORS: Final = ("...", "\u2028", "...", "\u2029", "...", "\x85")


def separator_tokens(count: int) -> list[str]:
    """``count`` tokens of ellipses and Unicode line ends, each a token of its own; the last is
    an ellipsis (a line end would join the prose's first word)."""
    tokens = [_SEPARATORS[n % len(_SEPARATORS)] for n in range(count)]
    if tokens and tokens[-1].isspace():
        tokens[-1] = "..."
    return tokens


def filler_tokens(count: int) -> list[str]:
    """``count`` tokens of empty filler that stay separate tokens before any prose.

    The last one is never a run of spaces (it would join the first word of the prose)."""
    tokens = [_FILLER[n % len(_FILLER)] for n in range(count)]
    if tokens and tokens[-1].isspace() and "\n" not in tokens[-1]:
        tokens[-1] = "..."
    return tokens


def iter_chunk_sizes(prompt: str, seed: int, total: int) -> Iterator[int]:
    """How many tokens each streamed chunk carries (mostly 1, often 2, sometimes 3), adding up
    to ``total``; made as they are taken."""
    rng = rng_for(prompt, seed, salt="chunks")
    left = total
    while left > 0:
        # Drawn a block at a time: the same sequence as one by one (each draw takes one
        # random()), at a fifth of the cost; the draws past the last chunk are never used.
        for size in rng.choices((1, 2, 3), weights=(6, 3, 1), k=min(left, 4096)):
            yield min(left, size)
            left -= size
            if left <= 0:
                return


def chunk_sizes(prompt: str, seed: int, total: int) -> list[int]:
    """How many tokens each streamed chunk carries: mostly 1, often 2, sometimes 3."""
    return list(iter_chunk_sizes(prompt, seed, total))
