"""Numbers the notebooks' prose states about a grading check are the check's own constants.

A sentence (or list item) that names a check in backticks and states one of its numbers (how
many streams, how long a first token takes, how soon the upstream must stop, how long a probe
may wait) must state the value the check uses. Notebook 02 once said 50 streams with a 1 s first
token and a 0.5 s probe limit while ``concurrency`` used 3 s and 1.5 s; this test reads both, so
the prose cannot drift from the code again. A notebook may also print the number from the
constant (``concurrency.TTFT_S``), which is better still: then there is no literal to check.

Each claim is a pattern with one number in it, tied to the checks it may describe. A unit of text
that names several checks passes when the number equals the constant of any of them that has the
pattern (04's list names ``cancel`` and ``cancel_before_first_token`` together).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from labkit.checks import (
    cancel,
    cancel_before_first_token,
    comment_silence,
    concurrency,
    integrity,
    keepalive,
    long_stream,
    minute_stream,
    trickle,
    usage,
    whole_answer,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12,
}  # fmt: skip
NUMBER = r"(\d+(?:\.\d+)?|" + "|".join(WORDS) + r")"


@dataclass(frozen=True)
class Claim:
    """A number stated in a pattern, and the value each check that has it uses."""

    name: str
    pattern: str
    values: dict[str, float]

    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern.replace("N", NUMBER), re.IGNORECASE)


def _seconds(scenario: dict[str, int], key: str) -> float:
    return scenario[key] / 1000


CLAIMS = [
    Claim("stream count", r"\bN (?:concurrent |parallel )?streams\b", {
        "concurrency": concurrency.STREAMS,
        "usage": len(usage.REQUESTS),
    }),
    Claim("first token", r"\bN s first[- ]token\b", {
        "concurrency": concurrency.TTFT_S,
        "long_stream": _seconds(long_stream.SCENARIO, "ttft_ms"),
    }),
    Claim("first token", r"first token takes N s\b", {
        "cancel_before_first_token": _seconds(cancel_before_first_token.SCENARIO, "ttft_ms"),
    }),
    Claim("probe interval", r"probe every N s\b", {"concurrency": concurrency.PROBE_EVERY_S}),
    Claim("probe limit", r"waits? more\s+than N s\b", {"concurrency": concurrency.MAX_PROBE_S}),
    Claim("probe limit", r"probe limit of N s\b", {"concurrency": concurrency.MAX_PROBE_S}),
    Claim("probe wait", r"probes wait (?:about |~)N s\b", {"concurrency": concurrency.TTFT_S}),
    Claim("answer length", r"\ba N s answer\b", {
        "cancel": cancel.SCENARIO["tokens"] / cancel.SCENARIO["tps"],
        "cancel_whole_answer": whole_answer.TOKENS / whole_answer.SCENARIO["tps"],
    }),
    Claim("hang-up", r"hangs up after N s\b", {
        "cancel": cancel.AFTER_S,
        "cancel_before_first_token": cancel_before_first_token.AFTER_S,
        "cancel_whole_answer": whole_answer.HANG_UP_S,
    }),
    Claim("stop limit", r"stop within N s\b", {
        "cancel": cancel.MAX_STOP_S,
        "cancel_before_first_token": cancel_before_first_token.MAX_STOP_S,
    }),
    Claim("silence", r"\bN s of (?:upstream )?silence\b", {
        "keepalive": keepalive.STALL_S,
        "minute_stream": minute_stream.STALL_S,
        "integrity": integrity.SILENCE_S,
    }),
    Claim("comment interval", r"comment every N ms\b", {
        "keepalive_under_comments": comment_silence.COMMENT_EVERY_MS,
    }),
    Claim("first token", r"first token only after N s\b", {
        "keepalive_under_comments": comment_silence.FIRST_TOKEN_S,
    }),
    Claim("silence limit", r"must stay under N s\b", {
        "keepalive_under_comments": comment_silence.MAX_SILENCE_S,
    }),
    Claim("token count", r"\bN tokens at\b", {"long_stream": long_stream.SCENARIO["tokens"]}),
    Claim("token rate", r"\bat N tokens/s\b", {
        "long_stream": long_stream.SCENARIO["tps"],
        "keepalive": keepalive.TPS,
    }),
    Claim("stream length", r"\babout N s of tokens\b", {
        "trickle": trickle.SCENARIO["tokens"] / trickle.SCENARIO["tps"],
    }),
]  # fmt: skip

CHECK_NAMES = sorted({check for claim in CLAIMS for check in claim.values}, key=len, reverse=True)
NAMED = re.compile(r"`(" + "|".join(CHECK_NAMES) + r")`")


def units(markdown: str) -> Iterator[str]:
    """Sentences, with each list item its own unit (a list often gives one check per item)."""
    for block in re.split(r"\n(?=\s*(?:[-*]|\d+\.)\s)|\n\s*\n", markdown):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])", block):
            yield " ".join(sentence.split())


def _value(text: str) -> float:
    return float(WORDS.get(text.lower(), 0) or text)


def mismatches(markdown: str) -> list[str]:
    """Every number the prose states about a check that differs from the check's constant."""
    found = []
    for unit in units(markdown):
        named = set(NAMED.findall(unit))
        if not named:
            continue
        for claim in CLAIMS:
            allowed = {claim.values[check] for check in named if check in claim.values}
            if not allowed:
                continue
            for match in claim.regex().finditer(unit):
                stated = _value(match.group(1))
                if not any(abs(stated - value) < 1e-9 for value in allowed):
                    expected = " or ".join(f"{value:g}" for value in sorted(allowed))
                    found.append(
                        f"{claim.name}: the prose says {match.group(0)!r} about "
                        f"{', '.join(sorted(named))}, whose constant is {expected}\n  in: {unit}"
                    )
    return found


def claims_made(markdown: str) -> int:
    """How many numbers about a check the prose states (so the test is seen to read something)."""
    count = 0
    for unit in units(markdown):
        named = set(NAMED.findall(unit))
        for claim in CLAIMS:
            if named & claim.values.keys():
                count += len(claim.regex().findall(unit))
    return count


def _markdown(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem[:2] for path in NOTEBOOKS])
def test_numbers_stated_about_a_check_are_its_constants(path: Path) -> None:
    wrong = mismatches(_markdown(path))
    assert not wrong, (
        f"{path.name} states numbers about a check that its code does not use. Print the "
        "constant from the check's module in a code cell, or state its value:\n" + "\n".join(wrong)
    )


def test_the_notebooks_state_numbers_that_this_test_reads() -> None:
    assert sum(claims_made(_markdown(path)) for path in NOTEBOOKS) > 0


def test_a_wrong_number_about_a_check_is_caught() -> None:
    prose = (
        "The `concurrency` check opens 7 streams with a 0.25 s first token.\n\n"
        "- `cancel`: the client hangs up after 1.2 s; the upstream must stop within 9 s.\n"
        "- `keepalive`: three tokens, then 4.5 s of upstream silence."
    )
    wrong = mismatches(prose)
    assert len(wrong) == 3, wrong
    assert any("'7 streams'" in line for line in wrong)
    assert any("'0.25 s first token'" in line for line in wrong)
    assert any("'stop within 9 s'" in line for line in wrong)


def test_a_right_number_about_a_check_passes() -> None:
    prose = (
        f"The `concurrency` check opens {concurrency.STREAMS} streams with a "
        f"{concurrency.TTFT_S:g} s first token.\n\n- `cancel_before_first_token`: the client "
        f"hangs up after {cancel_before_first_token.AFTER_S:g} s."
    )
    assert mismatches(prose) == []
    assert claims_made(prose) == 3
