"""Each notebook's committed outputs still show the verdicts its lessons depend on.

nbval re-runs a notebook and compares the new outputs with the committed ones, so it cannot tell
whether the committed ones are right: a notebook re-executed on a day its proxy was broken would
commit a FAIL, and nbval would then hold that FAIL in place. This test pins, for every notebook,
the verdict lines its prose relies on: the checks that must PASS, and the broken demonstrations
(03's gzip layer without a flush, 04's leaky proxy) that must stay FAIL. A pin is the verdict's
status and what it is about: the check id (``PASS cancel``), or, for a verdict without one, its
first words (``FAIL: through the leaky proxy``), so rewording a verdict's explanation does not
break it but losing the verdict, or flipping it, does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
VERDICT = re.compile(r"^\s*(PASS|FAIL)(?::\s*(.*)|\s+([\w-]+):)")
LEADING_WORDS = 5

PINS: dict[str, list[str]] = {
    "01": [
        "PASS text",
        "PASS trickle",
        "PASS timing_client",
        "PASS: on the real engine the",
    ],
    "02": [
        "PASS status",
        "PASS content_type",
        "PASS cache_control",
        "PASS x_accel_buffering",
        "PASS trickle",
        "PASS concurrency",
        "PASS: through your proxy the",
    ],
    "03": [
        "FAIL trickle",
        "PASS compress_and_flush",
        "PASS should_compress",
        "FAIL framer_that_waits",
        "PASS sse_events",
        "PASS sse_events_grouping",
        "PASS trickle",
        "PASS concurrency",
    ],
    "04": [
        "PASS cancel",
        "PASS cancel_before_first_token",
        "PASS cancel_queued",
        "PASS: through your proxy.py the",
        "FAIL: through the leaky proxy the",
    ],
    "05": ["PASS pass_on", "PASS usage", "PASS: the client that did"],
    "06": [
        "PASS midstream_error",
        "PASS upstream_status",
        "PASS error_before_first_token",
        "PASS cancel_whole_answer",
        "PASS content_encoding",
    ],
    "07": [
        "PASS upstream_timeout",
        "PASS next_item",
        "PASS long_stream",
        "PASS keepalive",
        "PASS passthrough",
        "PASS keepalive_under_comments",
        "PASS integrity",
    ],
    "08": ["PASS adapter", "PASS cache_and_stops", "PASS refusal", "PASS responses"],
    "09": [
        "PASS accumulate",
        "PASS scanner",
        "PASS validate",
        "PASS blocks",
        "PASS tool_calls",
        "PASS transcript",
    ],
    "10": ["PASS backpressure", "PASS stall_deadline"],
    "11": ["PASS metrics", "PASS billing", "PASS retries", "PASS no_answer"],
    "12": ["PASS states", "PASS release", "PASS by_sentence", "PASS gateway"],
    "13": ["PASS trickle", "PASS location", "PASS heartbeats"],
    "14": ["PASS predict", "PASS page_states", "PASS browser_cancel"],
    "15": [
        "PASS resume",
        "PASS resume_twice",
        "PASS resume_stop",
        "PASS resume_grace",
        "PASS replay_bound",
    ],
}


def _shown(cell: nbformat.NotebookNode) -> Iterable[str]:
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            yield from output.text.splitlines()
        elif output.output_type in ("execute_result", "display_data"):
            yield from str(output.get("data", {}).get("text/plain", "")).splitlines()


def verdict_key(line: str) -> str | None:
    """``PASS cancel`` for a check's verdict; ``FAIL: through the leaky proxy`` for one without."""
    match = VERDICT.match(line)
    if match is None:
        return None
    status, free_text, check_id = match.groups()
    if check_id:
        return f"{status} {check_id}"
    return f"{status}: " + " ".join(free_text.split()[:LEADING_WORDS])


def verdicts(nb: nbformat.NotebookNode) -> set[str]:
    return {
        key
        for cell in nb.cells
        if cell.cell_type == "code"
        for line in _shown(cell)
        if (key := verdict_key(line)) is not None
    }


def missing_pins(nb: nbformat.NotebookNode, pins: list[str]) -> list[str]:
    """A check's pin matches its id exactly; a free-text pin, the verdict's first words."""
    shown = verdicts(nb)
    return [
        pin
        for pin in pins
        if not any(key.startswith(pin) if ":" in pin else key == pin for key in shown)
    ]


def test_every_notebook_has_pins() -> None:
    assert sorted(PINS) == sorted(path.stem[:2] for path in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem[:2] for path in NOTEBOOKS])
def test_committed_outputs_keep_their_pinned_verdicts(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    lost = missing_pins(nb, PINS[path.stem[:2]])
    assert not lost, (
        f"{path.name}'s committed outputs no longer show {lost}. Its prose relies on them: if the "
        "notebook was re-executed with a broken proxy or a changed check, fix that and re-execute; "
        f"if the lesson changed on purpose, change PINS. It shows: {sorted(verdicts(nb))}"
    )


def _notebook_printing(*lines: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("print(...)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="\n".join(lines))]
    return nbformat.v4.new_notebook(cells=[cell])


def test_a_lost_or_flipped_verdict_is_caught() -> None:
    pins = ["PASS cancel", "FAIL: through the leaky proxy the"]
    whole = _notebook_printing(
        "PASS cancel: the upstream stopped soon after the client left",
        "FAIL: through the leaky proxy the engine was still generating",
    )
    assert missing_pins(whole, pins) == []
    flipped = _notebook_printing(
        "FAIL cancel: the upstream went on",
        "FAIL: through the leaky proxy the engine was still generating",
    )
    assert missing_pins(flipped, pins) == ["PASS cancel"]
    fixed_demo = _notebook_printing(
        "PASS cancel: the upstream stopped soon after the client left",
        "PASS: through the leaky proxy the engine stopped",
    )
    assert missing_pins(fixed_demo, pins) == ["FAIL: through the leaky proxy the"]


def test_a_check_id_is_not_confused_with_a_longer_one() -> None:
    nb = _notebook_printing("PASS cancel_before_first_token: stopped before its first token")
    assert missing_pins(nb, ["PASS cancel"]) == ["PASS cancel"]
