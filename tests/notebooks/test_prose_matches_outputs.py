"""Numbers the notebooks' prose states about a stored output are that output's.

A worked answer that quotes what a cell printed ("the run stored in this notebook: naive 1.0 s")
must quote the cell as it is stored; a sentence that says how an experiment came out ("close to 2×
per doubling") must be what the stored run shows. Notebook 09 once called its scanner "close to
2× per doubling" above a stored run that grew 1.5×, 2.7× and 3.6×, and promised "tens of
milliseconds" beside a printed 187 ms; notebook 05 said 8 tokens where its output said 9. This
test reads both sides, so a re-executed notebook whose numbers moved fails until its prose moves
with them (re-run on a quieter machine, or correct the sentence).

Each tie is a pattern in the markdown and a pattern in the stored outputs, one number each.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import httpx
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


@cache
def _notebook(prefix: str) -> nbformat.NotebookNode:
    (path,) = (ROOT / "notebooks").glob(f"{prefix}_*.ipynb")
    notebook: nbformat.NotebookNode = nbformat.read(path, as_version=4)
    return notebook


def prose(prefix: str) -> str:
    """The notebook's markdown, each cell's lines joined with spaces (a number may wrap)."""
    cells = _notebook(prefix).cells
    return "\n\n".join(" ".join(c.source.split()) for c in cells if c.cell_type == "markdown")


def outputs(prefix: str) -> str:
    """Every stored stream and text output of the notebook's code cells."""
    texts = []
    for cell in _notebook(prefix).cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                texts.append(output["text"])
            elif "text/plain" in output.get("data", {}):
                texts.append(output["data"]["text/plain"])
    return "\n".join(texts)


def number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class Tie:
    """A number the prose states (``stated``'s group) and the stored output it quotes."""

    notebook: str
    what: str
    stated: str
    printed: str
    tolerance: float = 0.0

    def check(self) -> list[str]:
        said = [number(m) for m in re.findall(self.stated, prose(self.notebook))]
        shown = [number(m) for m in re.findall(self.printed, outputs(self.notebook))]
        if not said:
            return [f"{self.notebook}, {self.what}: the prose no longer says {self.stated!r}"]
        if len(shown) != 1:
            return [f"{self.notebook}, {self.what}: {len(shown)} outputs match {self.printed!r}"]
        where = f"{self.notebook}, {self.what}"
        return [
            f"{where}: the prose says {value:g}, the stored output {shown[0]:g}"
            for value in said
            if abs(value - shown[0]) > self.tolerance
        ]


TIES = [
    Tie(
        "09",
        "the naive renderer's time at 20,000 characters",
        r"stored in this notebook: naive ([\d.]+) s",
        r"extrapolated to n=20000: naive ([\d.]+) s",
    ),
    Tie(
        "09",
        "the scanner's time at 20,000 characters",
        r"stored in this notebook: naive [\d.]+ s, scanner (\d+) ms",
        r"extrapolated to n=20000: naive [\d.]+ s, scanner (\d+) ms",
    ),
    Tie(
        "09",
        "where the naive renderer falls behind the stream",
        r"the stored run: ([\d,]+) characters",
        r"falls behind the stream from n = ([\d,]+) characters",
    ),
    Tie(
        "03",
        "gzip flushed only at the end",
        r"(\d+) bytes flushed only at the end",
        r"gzip, flushed only at the end: +(\d+) bytes",
    ),
    Tie(
        "03",
        "gzip with a sync flush per frame",
        r"(\d+) with a sync flush after each frame",
        r"gzip, sync flush after each frame: +(\d+) bytes",
    ),
    Tie(
        "03",
        "gzip with a full flush per frame",
        r"(\d+) with a full flush after each",
        r"gzip, full flush after each frame: +(\d+) bytes",
    ),
    Tie(
        "07",
        "when the bare client's read timeout ends the stream, seen from the upstream",
        r"gives up (\d+) s after the upstream's headers",
        r"the proxy hung up on the upstream ([\d.]+) s after its headers",
        tolerance=0.5,  # the read timeout, and the moments between the headers and the first read
    ),
    Tie(
        "05",
        "the cancelled request's tokens",
        r"`tokens_generated` \((\d+) in the run stored here",
        r"the cancelled request: the upstream generated (\d+) tokens",
    ),
]


@pytest.mark.parametrize("tie", TIES, ids=[f"{t.notebook}-{t.what}" for t in TIES])
def test_a_number_the_prose_quotes_is_the_stored_output(tie: Tie) -> None:
    wrong = tie.check()
    assert not wrong, "\n".join(wrong) + (
        "\nState the stored output's number, or re-execute the notebook and state the new one."
    )


def test_07s_five_seconds_are_httpxs_default_read_timeout() -> None:
    (stated,) = set(re.findall(r"gives up (\d+) s after the upstream's headers", prose("07")))
    assert float(stated) == httpx.AsyncClient().timeout.read


def _table(prefix: str, row: str) -> list[tuple[float, ...]]:
    return [tuple(map(number, m)) for m in re.findall(row, outputs(prefix))]


NINE_ROWS = r"n= *(\d+) chars +naive +([\d.]+) ms +scanner +([\d.]+) ms"


def _per_doubling(column: int) -> list[float]:
    rows = _table("09", NINE_ROWS)
    assert len(rows) == 4, "notebook 09's timing table should have four rows"
    return [b[column] / a[column] for a, b in itertools.pairwise(rows)]


CLAIMS: list[tuple[str, str, Callable[[], bool]]] = [
    (
        "09",
        "the scanner's time grows close to 2x per doubling",
        lambda: all(1.6 <= growth <= 2.5 for growth in _per_doubling(2)),
    ),
    (
        "09",
        "the naive renderer's time grows well above the scanner's, at every doubling",
        lambda: all(n > s * 1.3 for n, s in zip(_per_doubling(1), _per_doubling(2), strict=True)),
    ),
    (
        "09",
        "exercise 3: the naive renderer reaches a second or more at 20,000 characters",
        lambda: number(re.findall(r"n=20000: naive ([\d.]+) s", outputs("09"))[0]) >= 0.95,
    ),
    (
        "09",
        "exercise 3: the scanner stays in tens of milliseconds at 20,000 characters",
        lambda: (
            10
            <= number(re.findall(r"n=20000: naive [\d.]+ s, scanner (\d+) ms", outputs("09"))[0])
            < 100
        ),
    ),
]


@pytest.mark.parametrize(("notebook", "claim", "holds"), CLAIMS, ids=[c[1] for c in CLAIMS])
def test_what_the_prose_says_of_a_measurement_is_what_the_stored_run_shows(
    notebook: str, claim: str, holds: Callable[[], bool]
) -> None:
    assert holds(), (
        f"notebook {notebook}'s stored run does not show what its prose says: {claim}. Re-run "
        "it on a quieter machine, or say what the run shows."
    )


def test_a_number_that_differs_from_its_output_is_caught() -> None:
    other = Tie(
        "09",
        "a number quoted from the wrong line",
        r"stored in this notebook: naive ([\d.]+) s",
        r"naive cost of one fragment at n=\d+: ([\d.]+) ms",
    )
    (wrong,) = other.check()
    assert wrong.startswith("09, a number quoted from the wrong line: the prose says ")
    gone = Tie("09", "a sentence since rewritten", r"over (a hundred) thousand", r"n = ([\d,]+)")
    assert gone.check() == [
        "09, a sentence since rewritten: the prose no longer says 'over (a hundred) thousand'"
    ]
