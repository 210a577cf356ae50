"""Billing that reconciles with the provider's books (notebook 11).

The usage log has one line per upstream request (``log_usage``), but only a completed stream
carries the upstream's counts: a stream that errored or whose client left ended before the
usage chunk, and its line says ``null``. The provider still bills what it generated, up to
the moment it stopped (after the client left, too). So the bill takes the counts from where
they are known:

* a line with counts: the stream's own usage chunk (``source="stream"``);
* a line without counts: the provider's record of that request, found by its id
  (``source="provider"``): here the mock's ``/debug/requests``, in production the provider's
  usage export;
* a request in the provider's books that no line names (a client that left before the first
  chunk, whose id the proxy never saw): billed from the books too (``source="books only"``).

A request the provider refused before generating (an HTTP status of 400 or more) costs
nothing. Each event is priced from :data:`PRICES`, per million tokens by model. The bill then
adds up against the books: :func:`reconcile` says by how many tokens and dollars it differs
(zero when nothing was lost).

``reconciled_bill`` is notebook 11's build-it, the same code (the notebook prices one model);
``tests/notebooks/test_build_its_match_solutions.py`` keeps them so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final


class UnknownModelError(KeyError):
    """A request for a model the price table does not have."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.model = model

    def __str__(self) -> str:
        known = ", ".join(sorted(PRICES))
        return f"no price for model {self.model!r} (priced: {known}): add it to PRICES"


class PriceTable(dict[str, dict[str, float]]):
    """US dollars per million tokens, ``{"input": ..., "output": ...}`` by model. A model it
    does not have raises :class:`UnknownModelError`, which says what to do."""

    def __missing__(self, model: str) -> dict[str, float]:
        raise UnknownModelError(model)


#: A small per-model price table (made-up prices, in the shape real ones have).
PRICES: Final = PriceTable(
    {
        "mock-gpt": {"input": 2.50, "output": 10.00},
        "mock-claude": {"input": 3.00, "output": 15.00},
        "lab-model": {"input": 0.50, "output": 1.50},
    }
)


def reconciled_bill(
    lines: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One billing event per request the upstream generated for, from the usage log's ``lines``
    ({id, prompt_tokens, completion_tokens, total_tokens, outcome}; id None if the client left
    before the first chunk, the counts None if the stream ended before its usage chunk) and the
    provider's ``records`` ({id, model, status_code, prompt_tokens, tokens_generated, ...}): a
    list of {id, model, outcome, source, prompt_tokens, completion_tokens, usd}. ``source`` is
    "stream" (the line's counts), "provider" (a line without counts: the record's) or "books
    only" (a record no line names: outcome "cancelled"); ``model`` is the record's. No event for
    a record with a status of 400 or more, nor for a line whose id the books do not hold; each
    record once, in the lines' order, then the books-only ones in the books' order."""
    books = {r["id"]: r for r in records if r["status_code"] < 400}
    events = []
    for line in lines:
        record = books.pop(line["id"], None)
        if record is None:
            continue  # no id (gone before the first chunk), or refused with a status
        if line["completion_tokens"] is None:
            counts, source = (record["prompt_tokens"], record["tokens_generated"]), "provider"
        else:
            counts, source = (line["prompt_tokens"], line["completion_tokens"]), "stream"
        events.append({"id": record["id"], "model": record["model"], "outcome": line["outcome"],
                       "source": source, "prompt_tokens": counts[0],
                       "completion_tokens": counts[1]})  # fmt: skip
    for record in books.values():
        events.append({"id": record["id"], "model": record["model"], "outcome": "cancelled",
                       "source": "books only", "prompt_tokens": record["prompt_tokens"],
                       "completion_tokens": record["tokens_generated"]})  # fmt: skip
    for event in events:
        price = PRICES[event["model"]]
        event["usd"] = (event["prompt_tokens"] * price["input"]
                        + event["completion_tokens"] * price["output"]) / 1e6  # fmt: skip
    return events


@dataclass(frozen=True)
class Reconciliation:
    """The bill against the provider's books: equal when both differences are zero."""

    billed_tokens: int
    books_tokens: int
    billed_usd: float
    books_usd: float

    @property
    def token_difference(self) -> int:
        return self.billed_tokens - self.books_tokens

    @property
    def usd_difference(self) -> float:
        return round(self.billed_usd - self.books_usd, 9)


def reconcile(
    events: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]]
) -> Reconciliation:
    """Add up the bill and the books (prompt plus generated tokens, and their price), each
    priced on its own from :data:`PRICES`."""
    events = list(events)
    billable = [r for r in records if r["status_code"] < 400]
    books_usd = sum(
        r["prompt_tokens"] * PRICES[r["model"]]["input"]
        + r["tokens_generated"] * PRICES[r["model"]]["output"]
        for r in billable
    )
    return Reconciliation(
        billed_tokens=sum(e["prompt_tokens"] + e["completion_tokens"] for e in events),
        books_tokens=sum(r["prompt_tokens"] + r["tokens_generated"] for r in billable),
        billed_usd=sum(e["usd"] for e in events),
        books_usd=books_usd / 1e6,
    )
