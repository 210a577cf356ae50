"""Near-copies in a roster: how much of each submission's own code is found elsewhere.

The experiment, MOSS-style (Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003):

1. **Normalise** the source with :mod:`tokenize`: comments, docstrings and whitespace go;
   every identifier that is not a keyword or a builtin becomes ``V``, every string ``S``, every
   number ``N`` (an attribute is always ``V``, even ``.id``). Parentheses that only group, a
   trailing comma and a string split in two go too, so re-printing a copy (``ast.unparse``,
   black) hides nothing. Renaming, rewording messages and re-formatting change nothing; moving
   a function moves its tokens, which step 3 does not care about.
2. **k-grams**: hash each run of ``K`` consecutive tokens (12: about one statement, so a match
   is a statement-sized run of identical structure, not a shared idiom like ``V = V(V)``).
3. **Winnow**: in every window of ``W`` consecutive hashes keep the smallest. The kept hashes
   are the file's fingerprints, a set, so their order in the file is gone. Any run of
   ``K + W - 1`` identical tokens (19) is guaranteed to share a fingerprint.
4. **Subtract the scaffold**: the fingerprints of the code every learner is given (the
   reference with its solution regions stubbed, as ``labkit student`` writes it) are removed
   from every side, so two learners who wrote little are not alike for what they were given.
5. **Score** a pair by containment, ``|A ∩ B| / min(|A|, |B|)``: the share of the smaller side's
   own code found in the other. Not Jaccard (``|A ∩ B| / |A ∪ B|``): a learner who copied the
   parts they handed in and left the rest unwritten has copied all of what they handed in, and
   Jaccard would halve that; a copy padded with extra functions would dilute it too.
   Containment's weakness is a small side (two one-line parts everybody writes alike are
   "all shared"), so a pair is only flagged when it also shares ``MIN_SHARED`` fingerprints.

Measured against ``solutions/proxy.py`` (208 fingerprints of its own), k=12, w=8; score to the
reference (shared fingerprints):

    each of the 12 broken variants (patches of the reference)      0.92-1.00  (192-208)
    the reference renamed, functions reordered, ast.unparse'd      0.89       (186)
    notebooks 02-04 copied, the rest unwritten (Jaccard: 0.48)     1.00       (99)
    half copied (notebooks 02-04 copied, the rest written anew)    0.55       (115)
    an honest learner who wrote only 02-04                         0.31       (31)
    two honest fill-ins of the whole scaffold                      0.23, 0.16 (47, 34)
    a raw-ASGI proxy, a generator-based FastAPI proxy              0.02, 0.03 (4, 4)
    the scaffold alone                                             0.00       (0)

Between the independent proxies themselves: 0.19 at most (the two honest fill-ins, 40 shared).

Hence ``DEFAULT_THRESHOLD`` 0.5: above every independent proxy by 0.19, below every copy by
0.39, and a learner who copied half of their work is still flagged. Copying the four one-line
parts everybody writes alike (``make_client``, ``make_queue``...) scores 0.93 on 13 shared
fingerprints: ``MIN_SHARED`` keeps that out.

A flag is shown to the instructor, never scored: it says where to look, not what happened.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import keyword
import tokenize
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from labkit.regions import regions, strip_solutions

__all__ = [
    "DEFAULT_THRESHOLD",
    "MIN_SHARED",
    "Match",
    "SimilarityRow",
    "compare_roster",
    "fingerprints",
    "normalised_tokens",
    "scaffold_of",
    "similarity",
    "similarity_markdown",
]

K = 12  # tokens per k-gram
W = 8  # k-gram hashes per winnowing window
DEFAULT_THRESHOLD = 0.5  # measured: copies 0.89-1.00, half copied 0.55, independent <= 0.31
MIN_SHARED = 20  # fingerprints in common before a pair can be flagged (the reference has ~200)
FLAG = "near-copy"

_KEPT_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins))
_SKIPPED = frozenset(
    {
        *(tokenize.COMMENT, tokenize.TYPE_COMMENT, tokenize.ENCODING, tokenize.ENDMARKER),
        *(tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT),
    }
)
# Python 3.12 splits f-strings into tokens; before, an f-string is one STRING.
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)

Fingerprints = frozenset[int]
Against = Literal["reference", "learner"]


def _raw_tokens(source: str) -> Iterator[tokenize.TokenInfo]:
    """The source's tokens, stopping quietly where it stops being Python (a syntax error)."""
    try:
        yield from tokenize.generate_tokens(io.StringIO(source).readline)
    except (tokenize.TokenError, SyntaxError):
        return


def _logical_lines(source: str) -> Iterator[list[tokenize.TokenInfo]]:
    line: list[tokenize.TokenInfo] = []
    for token in _raw_tokens(source):
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            yield line
            line = []
        elif token.type not in _SKIPPED:
            line.append(token)
    if line:
        yield line


def normalised_tokens(source: str) -> list[str]:
    """``source`` as the tokens that survive step 1 (see the module docstring)."""
    out: list[str] = []
    for line in _logical_lines(source):
        if all(t.type == tokenize.STRING for t in line):
            continue  # a docstring, or a string standing alone as a statement
        depth = 0  # inside an f-string (3.12+): its parts are one string
        for token in line:
            if token.type == _FSTRING_START:
                depth += 1
                if depth == 1:
                    out.append("S")
            elif token.type == _FSTRING_END:
                depth -= 1
            elif depth:
                continue
            elif token.type == tokenize.NAME:
                kept = token.string in _KEPT_NAMES and (not out or out[-1] != ".")
                out.append(token.string if kept else "V")  # an attribute is always a name
            elif token.type == tokenize.STRING:
                out.append("S")
            elif token.type == tokenize.NUMBER:
                out.append("N")
            else:
                out.append(token.string)
    return _layout_free(out)


def _layout_free(tokens: list[str]) -> list[str]:
    """Undo what formatters and line lengths change: parentheses that only group (not a call's
    or a definition's), a trailing comma before a closing bracket, and strings split in two
    (``"a" "b"``), so that re-printing a copy (``ast.unparse``, black) does not hide it."""
    out: list[str] = []
    grouping: list[bool] = []  # one per open "(": does it only group?
    for token in tokens:
        if token == "(":
            previous = out[-1] if out else ""
            called = previous in (")", "]", "S", "V") or (
                previous.isidentifier() and not keyword.iskeyword(previous)
            )
            grouping.append(not called)
            if called:
                out.append(token)
            continue
        if token in ")]}" and out and out[-1] == ",":
            out.pop()
        if token == ")":
            if grouping and grouping.pop():
                continue
        elif token == "S" and out and out[-1] == "S":
            continue
        out.append(token)
    return out


def _hash(gram: list[str]) -> int:
    digest = hashlib.blake2b("\x1f".join(gram).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def fingerprints(source: str, *, k: int = K, w: int = W) -> Fingerprints:
    """The winnowed hashes of ``source``'s normalised k-grams (steps 1 to 3)."""
    tokens = normalised_tokens(source)
    hashes = [_hash(tokens[i : i + k]) for i in range(len(tokens) - k + 1)]
    if not hashes:
        return frozenset()
    if len(hashes) <= w:
        return frozenset({min(hashes)})
    kept: set[int] = set()
    for start in range(len(hashes) - w + 1):
        kept.add(min(hashes[start : start + w]))
    return frozenset(kept)


def scaffold_of(reference: str) -> str:
    """The code every learner is given: ``reference`` with its solution regions stubbed, as
    ``labkit student`` writes the learner's proxy.py (stub messages differ, but step 1 turns
    every string into ``S``). Empty when the reference has no solution regions."""
    if not regions(reference, where="the reference solution"):
        return ""
    return strip_solutions(reference, kind="code", notebook="the reference solution")[0]


def similarity(a: Fingerprints, b: Fingerprints) -> float:
    """Containment, ``|a ∩ b| / min(|a|, |b|)``, in [0, 1]; 0 when either side is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


@dataclass(frozen=True)
class Match:
    """One comparison: the score and how many fingerprints the two sides share."""

    score: float
    shared: int


def _match(a: Fingerprints, b: Fingerprints) -> Match:
    return Match(similarity(a, b), len(a & b))


@dataclass(frozen=True)
class SimilarityRow:
    """One submission's closest matches: to the reference, and to any other submission."""

    learner: str
    own: int  # fingerprints of the learner's own code, the scaffold removed
    to_reference: Match | None
    closest: str | None  # the other learner it is most alike, None when alone in the roster
    to_closest: Match | None
    threshold: float

    @property
    def near_copy(self) -> tuple[Against, Match] | None:
        """The match that makes this a near-copy (the higher one if both do), else None."""
        candidates: list[tuple[Against, Match | None]] = [
            ("reference", self.to_reference),
            ("learner", self.to_closest),
        ]
        flagged = [
            (kind, match)
            for kind, match in candidates
            if match is not None and match.score > self.threshold and match.shared >= MIN_SHARED
        ]
        return max(flagged, key=lambda found: found[1].score, default=None)

    @property
    def flag(self) -> str:
        return "" if self.near_copy is None else FLAG


def compare_roster(
    sources: Mapping[str, str],
    *,
    reference: str | None,
    base: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> dict[str, SimilarityRow]:
    """Each learner's best match to ``reference`` and to the other learners in ``sources``
    (learner name to source), the fingerprints of ``base`` (default: the reference's scaffold)
    removed from every side first."""
    if base is None:
        base = scaffold_of(reference) if reference is not None else ""
    given = fingerprints(base)
    own = {learner: fingerprints(source) - given for learner, source in sources.items()}
    solution = None if reference is None else fingerprints(reference) - given
    rows = {}
    for learner, mine in own.items():
        others = {other: _match(mine, theirs) for other, theirs in own.items() if other != learner}
        closest = max(others, key=lambda o: (others[o].score, others[o].shared), default=None)
        rows[learner] = SimilarityRow(
            learner=learner,
            own=len(mine),
            to_reference=None if solution is None else _match(mine, solution),
            closest=closest,
            to_closest=None if closest is None else others[closest],
            threshold=threshold,
        )
    return rows


def _score(match: Match | None) -> str:
    return "" if match is None else f"{match.score:.2f}"


def _highest(row: SimilarityRow) -> float:
    return max((m.score for m in (row.to_reference, row.to_closest) if m is not None), default=0)


def similarity_markdown(rows: Mapping[str, SimilarityRow], *, reference: str) -> str:
    """The instructor's page: every submission, most alike first, with what the numbers mean."""
    ordered = sorted(rows.values(), key=_highest, reverse=True)
    threshold = next(iter(rows.values())).threshold if rows else DEFAULT_THRESHOLD
    lines = [
        "# Similarity (for the instructor)",
        "",
        f"Each submission's own code (the scaffold of {reference} removed) compared with the "
        "reference and with every other submission: token fingerprints over normalised code, so "
        "renamed variables and moved functions still match. 1.00 means all of the smaller side's "
        f"code is in the other. Flagged above {threshold:.2f} with at least {MIN_SHARED} "
        "fingerprints shared. A flag says where to look; it is not a verdict and not scored.",
        "",
        "| learner | own fingerprints | to reference | most similar learner | similarity | flag |",
        "|---|---|---|---|---|---|",
    ]
    for row in ordered:
        lines.append(
            f"| {row.learner} | {row.own} | {_score(row.to_reference)} | {row.closest or ''} | "
            f"{_score(row.to_closest)} | {row.flag} |"
        )
    return "\n".join(lines) + "\n"
