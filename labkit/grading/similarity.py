"""Near-copies in a roster: how much of each submission's own code is found elsewhere.

The experiment, MOSS-style (Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003):

1. **Normalise** the source with :mod:`tokenize`, one logical line at a time: comments,
   docstrings and whitespace go; every identifier that is not a keyword or a builtin becomes
   ``V``, every string ``S``, every number ``N`` (an attribute is always ``V``, even ``.id``).
   Parentheses that only group, a trailing comma and a string split in two go too, so
   re-printing a copy (``ast.unparse``, black) hides nothing. Renaming, rewording messages and
   re-formatting change nothing; moving a function moves its tokens, which step 4 does not
   care about.
2. **Keep the submission's own lines**: the normalised lines are diffed against those of the
   scaffold every learner is given (the reference with its solution regions stubbed, as
   ``labkit student`` writes the learner's proxy.py), and what the diff does not match is the
   learner's: their parts and helpers, as runs of consecutive lines. The reference's own lines
   are its solution regions. Code copied from the scaffold into a run still counts for
   nothing: the scaffold's fingerprints are removed from every side as well.
3. **k-grams**, within each run: hash each run of ``K`` consecutive tokens (12: about one
   statement, so a match is a statement-sized run of identical structure, not a shared idiom
   like ``V = V(V)``). No k-gram spans given code and the learner's: a function's given
   signature followed by a first line everybody starts alike is not a match.
4. **Winnow**: in every window of ``W`` consecutive hashes keep the smallest. The kept hashes
   are the submission's fingerprints, a set, so their order in the file is gone. Any run of
   ``K + W - 1`` identical tokens (19) is guaranteed to share a fingerprint.
5. **Score** a pair by containment, ``|A ∩ B| / min(|A|, |B|)``: the share of the smaller side's
   own code found in the other. Not Jaccard (``|A ∩ B| / |A ∪ B|``): a learner who copied the
   parts they handed in and left the rest unwritten has copied all of what they handed in, and
   Jaccard would halve that; a copy padded with extra functions would dilute it too.
   Containment's weakness is a small side (two one-line parts everybody writes alike are
   "all shared"), so a pair is only flagged when it also shares ``MIN_SHARED`` fingerprints.
6. **Show the evidence**: for a flagged pair, ``matched_spans`` gives the lines of each side
   that the shared fingerprints come from, paired (``similarity.md`` prints them one above the
   other), so that the instructor judges the code, not the number.

Calibrated (issue 45) on three whole proxies written for it from the learner bundle and the
notebooks alone, each in its own style, and kept as test data (``tests/grading/honest/``:
``tasks_and_classes``, ``callbacks_and_helpers``, ``minimal``; each 100/100 by ``labkit
grade``), the two honest fill-ins of ``tests/grading/test_similarity.py``, and copies. Against
``solutions/proxy.py`` (291 fingerprints of its own), k=12, w=8; score to the reference
(shared fingerprints), before (the whole file fingerprinted, the scaffold's fingerprints
subtracted) and now:

                                                             before           now
    the three honest solutions                               0.17-0.29        0.14-0.24 (41-70)
    the two honest fill-ins                                  0.18-0.20        0.12-0.13 (29-30)
    honest partial hand-ins: any set of notebooks of the
      three (765), those sharing >= MIN_SHARED               up to 0.80 (24)  up to 0.34 (20)
    the three and the fill-ins, pairwise (to each other)     up to 0.26       up to 0.20 (46)
    a raw-ASGI proxy, a generator-based FastAPI proxy        0.02             0.01-0.02 (2-4)
    half copied (six parts of the reference, the rest
      an honest fill-in's)                                   0.52             0.51 (141)
    the reference renamed, functions reordered, unparsed     0.91             0.99 (289)
    each of the grader's 31 broken variants (patches)        0.95-1.00        0.96-1.00
    the scaffold alone                                       0.00             0.00 (0)

The honest hand-in at 0.80 is the bug: notebooks 03 and 07 of ``tasks_and_classes`` alone,
24 shared fingerprints, most of them k-grams across a given signature and the first or last
line of a part, which everybody writes alike; its own lines share 8. Hence
``DEFAULT_THRESHOLD`` 0.45: 0.11 above every honest score that shares ``MIN_SHARED``
fingerprints (a smaller match cannot be flagged), 0.21 above the whole honest proxies, 0.06
below half copied and 0.54 below a renamed copy. A flag is shown to the instructor, never
scored: it says where to look, with the lines that matched, not what happened.
"""

from __future__ import annotations

import bisect
import builtins
import dataclasses
import difflib
import hashlib
import io
import itertools
import keyword
import tokenize
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from labkit.regions import regions, strip_solutions

__all__ = [
    "DEFAULT_THRESHOLD",
    "MIN_SHARED",
    "Match",
    "MatchedSpan",
    "SimilarityRow",
    "compare_roster",
    "fingerprints",
    "matched_spans",
    "normalised_tokens",
    "own_fingerprints",
    "scaffold_of",
    "similarity",
    "similarity_markdown",
]

K = 12  # tokens per k-gram
W = 8  # k-gram hashes per winnowing window
DEFAULT_THRESHOLD = 0.45  # measured: honest <= 0.34, half copied 0.51, copies 0.96-1.00
MIN_SHARED = 20  # fingerprints in common before a pair can be flagged (the reference has ~290)
SPANS_SHOWN = 12  # matched spans printed per flagged submission in similarity.md
_COMMON = 50  # a k-gram found more often than this in one file is not paired into spans
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


@dataclass(frozen=True)
class _Line:
    """One logical line, normalised (step 1), and where it is in the source (1-based)."""

    tokens: tuple[str, ...]
    first: int
    last: int


def _normalised_lines(source: str) -> list[_Line]:
    lines = []
    for line in _logical_lines(source):
        if all(t.type == tokenize.STRING for t in line):
            continue  # a docstring, a string standing alone as a statement, or nothing
        out: list[str] = []
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
        lines.append(_Line(tuple(_layout_free(out)), line[0].start[0], line[-1].end[0]))
    return lines


def normalised_tokens(source: str) -> list[str]:
    """``source`` as the tokens that survive step 1 (see the module docstring)."""
    return [token for line in _normalised_lines(source) for token in line.tokens]


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


def _hash(gram: Sequence[str]) -> int:
    digest = hashlib.blake2b("\x1f".join(gram).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class _Gram:
    """One k-gram of a run: its hash, its place among the file's k-grams, and the source lines
    of its first and last token."""

    hash: int
    at: int
    first: int
    last: int


def _grams(run: Sequence[_Line], k: int, start: int = 0) -> list[_Gram]:
    tokens = [(token, line) for line in run for token in line.tokens]
    return [
        _Gram(
            _hash([t for t, _ in tokens[i : i + k]]),
            start + i,
            tokens[i][1].first,
            tokens[i + k - 1][1].last,
        )
        for i in range(len(tokens) - k + 1)
    ]


def _winnow(hashes: Sequence[int], w: int) -> set[int]:
    if not hashes:
        return set()
    if len(hashes) <= w:
        return {min(hashes)}
    return {min(hashes[start : start + w]) for start in range(len(hashes) - w + 1)}


def fingerprints(source: str, *, k: int = K, w: int = W) -> Fingerprints:
    """The winnowed hashes of the normalised k-grams of the whole of ``source`` (steps 1, 3
    and 4, the file as one run)."""
    return frozenset(_winnow([g.hash for g in _grams(_normalised_lines(source), k)], w))


def _given(lines: list[_Line], given: list[_Line]) -> set[int]:
    """Which of ``lines`` are ``given``'s, by a patience diff: the lines found once on each
    side are anchors (the longest chain of them in the same order on both), each anchor grows
    up and down while both sides go on alike, and what lies between two matched stretches is
    diffed on its own. A given function's signature is such an anchor; its decorators and given
    first lines come with it. (An LCS diff of the whole files, difflib's, can pair a line with a
    like one elsewhere and leave a signature unmatched.)"""
    mine, base = [line.tokens for line in lines], [line.tokens for line in given]
    in_mine, in_base = Counter(mine), Counter(base)
    once = {key: j for j, key in enumerate(base) if in_base[key] == 1}
    pairs = [(i, once[key]) for i, key in enumerate(mine) if in_mine[key] == 1 and key in once]
    matched: dict[int, int] = {}  # a line of ``lines``: the line of ``given`` it is
    for i, j in _longest_chain(pairs):
        if i in matched:
            continue  # grown over by the anchor before it
        matched[i] = j
        for step in (-1, 1):
            a, b = i + step, j + step
            while 0 <= a < len(mine) and 0 <= b < len(base) and mine[a] == base[b]:
                if a in matched:  # (anchors come in order on both sides: so do their stretches)
                    break
                matched[a] = b
                a, b = a + step, b + step
    stretches = [(-1, -1), *sorted(matched.items()), (len(mine), len(base))]
    for (a, b), (next_a, next_b) in itertools.pairwise(stretches):
        if next_a - a > 1 and next_b - b > 1:  # lines on both sides between two stretches
            gap = difflib.SequenceMatcher(None, mine[a + 1 : next_a], base[b + 1 : next_b], False)
            for start, _, size in gap.get_matching_blocks():
                matched.update((a + 1 + k, -1) for k in range(start, start + size))
    return set(matched)


def _longest_chain(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of ``pairs`` (increasing in their first item) whose second items
    increase too (patience sorting)."""
    tops: list[int] = []  # the smallest second item ending a chain of each length
    ends: list[int] = []  # the index in pairs of that chain's last pair
    before: list[int] = []  # for each pair, the index of the pair before it in its chain
    for index, (_, j) in enumerate(pairs):
        length = bisect.bisect_left(tops, j)
        before.append(ends[length - 1] if length else -1)
        if length == len(tops):
            tops.append(j)
            ends.append(index)
        else:
            tops[length], ends[length] = j, index
    chain, at = [], ends[-1] if ends else -1
    while at >= 0:
        chain.append(pairs[at])
        at = before[at]
    return chain[::-1]


def _own_runs(lines: list[_Line], given: list[_Line]) -> list[list[_Line]]:
    """Step 2: the runs of ``lines`` that are not ``given``'s."""
    if not given:
        return [lines] if lines else []
    matched = _given(lines, given)
    runs: list[list[_Line]] = [[]]
    for index, line in enumerate(lines):
        if index in matched:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(line)
    return [run for run in runs if run]


@dataclass(frozen=True)
class _Base:
    """The code every learner is given, ready to diff against: its lines and fingerprints."""

    lines: list[_Line]
    prints: Fingerprints

    @classmethod
    def of(cls, base: str) -> _Base:
        return cls(_normalised_lines(base), fingerprints(base))


@dataclass(frozen=True)
class _Own:
    """A submission's own code (steps 1 to 4): its runs' k-grams, its fingerprints, its lines."""

    grams: list[list[_Gram]]
    prints: Fingerprints
    text: list[str]

    @classmethod
    def of(cls, source: str, base: _Base) -> _Own:
        grams: list[list[_Gram]] = []
        for run in _own_runs(_normalised_lines(source), base.lines):
            grams.append(_grams(run, K, start=sum(map(len, grams))))
        prints = set().union(*(_winnow([g.hash for g in run], W) for run in grams))
        return cls(grams, frozenset(prints) - base.prints, source.split("\n"))


def own_fingerprints(source: str, base: str = "") -> Fingerprints:
    """The fingerprints of what ``source`` adds to ``base`` (steps 1 to 4): of its lines that
    a diff against ``base`` does not match, less ``base``'s own fingerprints."""
    return _Own.of(source, _Base.of(base)).prints


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
class MatchedSpan:
    """Lines of a submission whose code is also in the other side (the reference or another
    learner), with the lines there that it matches: first and last line, 1-based, and text."""

    lines: tuple[int, int]
    text: str
    other_lines: tuple[int, int]
    other_text: str
    shared: int  # the pair's shared fingerprints first found in this span (none counts twice)


def _diagonals(
    mine: list[list[_Gram]], theirs: list[list[_Gram]]
) -> list[list[tuple[_Gram, _Gram]]]:
    """Every maximal run of consecutive k-grams of ``mine`` equal, one for one, to consecutive
    k-grams of ``theirs`` (wherever they are there: a moved function is still a run)."""
    where: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r, run in enumerate(theirs):
        for i, gram in enumerate(run):
            where[gram.hash].append((r, i))
    for gram_hash in [h for h, found in where.items() if len(found) > _COMMON]:
        del where[gram_hash]  # an idiom of theirs, no evidence (and pairing it would be slow)
    found: list[list[tuple[_Gram, _Gram]]] = []
    for run in mine:
        open_: dict[tuple[int, int], list[tuple[_Gram, _Gram]]] = {}  # by their next position
        for gram in run:
            extended: dict[tuple[int, int], list[tuple[_Gram, _Gram]]] = {}
            for r, i in where.get(gram.hash, ()):
                diagonal = open_.pop((r, i), None) or []
                diagonal.append((gram, theirs[r][i]))
                extended[(r, i + 1)] = diagonal
            found.extend(open_.values())
            open_ = extended
        found.extend(open_.values())
    return found


def _text(lines: list[str], span: tuple[int, int]) -> str:
    return "\n".join(lines[span[0] - 1 : span[1]])


def _spans(mine: _Own, theirs: _Own) -> tuple[MatchedSpan, ...]:
    shared = mine.prints & theirs.prints
    diagonals = [
        d for d in _diagonals(mine.grams, theirs.grams) if any(a.hash in shared for a, _ in d)
    ]
    diagonals.sort(key=len, reverse=True)  # the longest first; a repeat of its code loses
    used: list[tuple[tuple[int, int], tuple[int, int]]] = []  # k-grams taken, on each side
    taken: list[tuple[tuple[int, int], tuple[int, int], set[int]]] = []
    claimed: set[int] = set()  # a fingerprint counts for the first (longest) span that has it
    for diagonal in diagonals:
        (a, b), (y, z) = diagonal[0], diagonal[-1]
        if any(_overlap((a.at, y.at), h) or _overlap((b.at, z.at), t) for h, t in used):
            continue
        used.append(((a.at, y.at), (b.at, z.at)))
        prints = {gram.hash for gram, _ in diagonal} & shared - claimed
        claimed |= prints
        taken.append(((a.first, y.last), (b.first, z.last), prints))
    taken.sort(key=lambda span: (span[0], span[1]))
    merged: list[tuple[tuple[int, int], tuple[int, int], set[int]]] = []
    for here, there, prints in taken:  # a span that goes on where the last one stopped, in both
        if merged and _follows(merged[-1][0], here) and _follows(merged[-1][1], there):
            last_here, last_there, last_prints = merged[-1]
            here, there = (last_here[0], here[1]), (last_there[0], there[1])
            merged[-1] = (here, there, last_prints | prints)
        else:
            merged.append((here, there, prints))
    return tuple(
        MatchedSpan(here, _text(mine.text, here), there, _text(theirs.text, there), len(prints))
        for here, there, prints in merged
    )


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _follows(before: tuple[int, int], after: tuple[int, int]) -> bool:
    return before[0] <= after[0] <= before[1] + 1


def matched_spans(source: str, other: str, *, base: str = "") -> tuple[MatchedSpan, ...]:
    """The lines of ``source`` whose own code (``base`` set aside, as in ``compare_roster``)
    is also in ``other``'s, each with the lines of ``other`` it matches, in ``source``'s
    order. Each span holds at least one of the pair's shared fingerprints."""
    given = _Base.of(base)
    return _spans(_Own.of(source, given), _Own.of(other, given))


@dataclass(frozen=True)
class Match:
    """One comparison: the score and how many fingerprints the two sides share."""

    score: float
    shared: int


def _match(a: Fingerprints, b: Fingerprints) -> Match:
    return Match(similarity(a, b), len(a & b))


@dataclass(frozen=True)
class SimilarityRow:
    """One submission's closest matches: to the reference, and to any other submission; for a
    near-copy, the lines that matched (``matched``, against the side it is a near-copy of)."""

    learner: str
    own: int  # fingerprints of the learner's own code, the scaffold removed
    to_reference: Match | None
    closest: str | None  # the other learner it is most alike, None when alone in the roster
    to_closest: Match | None
    threshold: float
    matched: tuple[MatchedSpan, ...] = ()

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
    (learner name to source), each side's own code only (``base``, by default the reference's
    scaffold, set aside: steps 2 to 4); a near-copy's row carries the lines that matched."""
    if base is None:
        base = scaffold_of(reference) if reference is not None else ""
    given = _Base.of(base)
    own = {learner: _Own.of(source, given) for learner, source in sources.items()}
    solution = None if reference is None else _Own.of(reference, given)
    rows = {}
    for learner, mine in own.items():
        others = {
            o: _match(mine.prints, theirs.prints) for o, theirs in own.items() if o != learner
        }
        closest = max(others, key=lambda o: (others[o].score, others[o].shared), default=None)
        row = SimilarityRow(
            learner=learner,
            own=len(mine.prints),
            to_reference=None if solution is None else _match(mine.prints, solution.prints),
            closest=closest,
            to_closest=None if closest is None else others[closest],
            threshold=threshold,
        )
        if row.near_copy is not None:  # the evidence, against the side it is a near-copy of
            against = own[str(closest)] if row.near_copy[0] == "learner" else solution
            if against is not None:
                row = dataclasses.replace(row, matched=_spans(mine, against))
        rows[learner] = row
    return rows


def _score(match: Match | None) -> str:
    return "" if match is None else f"{match.score:.2f}"


def _highest(row: SimilarityRow) -> float:
    return max((m.score for m in (row.to_reference, row.to_closest) if m is not None), default=0)


def _numbered(text: str, first: int) -> list[str]:
    lines = text.split("\n")
    width = len(str(first + len(lines) - 1))
    return ["```", *(f"{first + i:>{width}}  {line}" for i, line in enumerate(lines)), "```"]


def _evidence(row: SimilarityRow, reference: str) -> list[str]:
    """A flagged row's matched spans: its lines, then the other side's, span by span."""
    if row.near_copy is None:
        return []
    against, match = row.near_copy
    other = reference if against == "reference" else str(row.closest)
    shown = sorted(row.matched, key=lambda span: span.shared, reverse=True)[:SPANS_SHOWN]
    lines = [
        f"### {row.learner}: near-copy of {other} ({match.score:.2f}, {match.shared} "
        "fingerprints shared)",
        "",
        f"{len(row.matched)} spans of {row.learner}'s own code are also in {other}"
        + (
            f"; the {len(shown)} with the most shared fingerprints are shown"
            if len(shown) < len(row.matched)
            else ""
        )
        + ". Each span: the learner's lines, then the lines they match.",
    ]
    for span in sorted(shown, key=lambda span: span.lines):
        (first, last), (other_first, other_last) = span.lines, span.other_lines
        lines += [
            "",
            f"**{row.learner}, lines {first}-{last}** matches **{other}, lines "
            f"{other_first}-{other_last}** ({span.shared} shared):",
            "",
            *_numbered(span.text, first),
            "",
            *_numbered(span.other_text, other_first),
        ]
    return ["", *lines]


def similarity_markdown(rows: Mapping[str, SimilarityRow], *, reference: str) -> str:
    """The instructor's page: every submission, most alike first, with what the numbers mean;
    then, for each near-copy, the lines that matched, next to the lines they match."""
    ordered = sorted(rows.values(), key=_highest, reverse=True)
    threshold = next(iter(rows.values())).threshold if rows else DEFAULT_THRESHOLD
    lines = [
        "# Similarity (for the instructor)",
        "",
        f"Each submission's own code (the lines that are not the scaffold of {reference}) "
        "compared with the reference's solution regions and with every other submission: token "
        "fingerprints over normalised code, so renamed variables and moved functions still "
        "match. 1.00 means all of the smaller side's code is in the other. Flagged above "
        f"{threshold:.2f} with at least {MIN_SHARED} fingerprints shared. A flag says where to "
        "look; it is not a verdict and not scored. Below the table, each flagged submission's "
        "matched lines, to judge from the code itself.",
        "",
        "| learner | own fingerprints | to reference | most similar learner | similarity | flag |",
        "|---|---|---|---|---|---|",
    ]
    for row in ordered:
        lines.append(
            f"| {row.learner} | {row.own} | {_score(row.to_reference)} | {row.closest or ''} | "
            f"{_score(row.to_closest)} | {row.flag} |"
        )
    flagged = [row for row in ordered if row.near_copy is not None]
    if flagged:
        lines += ["", "## The lines that matched"]
        for row in flagged:
            lines += _evidence(row, reference)
    return "\n".join(lines) + "\n"
