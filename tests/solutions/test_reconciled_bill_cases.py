"""``reconciled_bill`` does what its docstring (and notebook 11's table) says, case by case, on
constructed lines and records: the specification a learner writes it from.

Bug: the docstring named the event's keys without ``model``, which the given pricing code reads,
and left the ``source`` labels and the edge cases to a later print loop: written from it, the
part raised ``KeyError: 'model'``. Fix: the docstring and the notebook's table say the inputs,
the outputs and every case; these tests hold the code to them.
"""

from __future__ import annotations

from typing import Any

from solutions.billing import PRICES, reconciled_bill


def record(rid: str, status: int = 200, prompt: int = 10, generated: int = 20) -> dict[str, Any]:
    return {"id": rid, "model": "mock-gpt", "status_code": status, "prompt_tokens": prompt,
            "tokens_generated": generated, "api": "chat"}  # fmt: skip


def line(rid: str | None, outcome: str, counts: tuple[int, int] | None) -> dict[str, Any]:
    prompt, completion = counts if counts else (None, None)
    total = None if counts is None else prompt + completion  # type: ignore[operator]
    return {"id": rid, "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": total, "outcome": outcome}  # fmt: skip


def test_each_case_of_the_table() -> None:
    records = [record("a"), record("b"), record("c", generated=7), record("d", status=429)]
    lines = [
        line("a", "completed", (10, 20)),  # counts: the stream's
        line("b", "error", None),  # no counts: the provider's
        line(None, "cancelled", None),  # gone before the first chunk: no id
        line("d", "error", None),  # refused with a status: generated nothing
        line("zzz", "completed", (1, 1)),  # not in the books
    ]
    events = reconciled_bill(lines, records)
    assert [(e["id"], e["source"], e["outcome"]) for e in events] == [
        ("a", "stream", "completed"),
        ("b", "provider", "error"),
        ("c", "books only", "cancelled"),
    ]
    assert [(e["prompt_tokens"], e["completion_tokens"]) for e in events] == [
        (10, 20),
        (10, 20),
        (10, 7),
    ]
    price = PRICES["mock-gpt"]
    for event in events:
        assert set(event) == {"id", "model", "outcome", "source", "prompt_tokens",
                              "completion_tokens", "usd"}  # fmt: skip
        assert event["model"] == "mock-gpt"  # the record's: a usage line has no model
        expected = (
            event["prompt_tokens"] * price["input"] + event["completion_tokens"] * price["output"]
        )
        assert event["usd"] == expected / 1e6


def test_each_record_is_billed_once_in_the_lines_order_then_the_books() -> None:
    records = [record("a"), record("b"), record("c"), record("d")]
    lines = [line("c", "completed", (10, 20)), line("a", "completed", (10, 20)),
             line("c", "completed", (10, 20))]  # fmt: skip
    events = reconciled_bill(lines, records)
    assert [e["id"] for e in events] == ["c", "a", "b", "d"]
    assert [e["source"] for e in events] == ["stream", "stream", "books only", "books only"]


def test_nothing_in_nothing_out() -> None:
    assert reconciled_bill([], []) == []
    assert reconciled_bill([line("a", "completed", (1, 2))], []) == []
