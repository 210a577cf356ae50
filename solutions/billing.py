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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

Source = Literal["stream", "provider", "books only"]


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


#: A small per-model price table (made-up prices, in the shape real ones have).
PRICES: Final[dict[str, Price]] = {
    "mock-gpt": Price(input=2.50, output=10.00),
    "mock-claude": Price(input=3.00, output=15.00),
    "lab-model": Price(input=0.50, output=1.50),
}


class UnknownModelError(KeyError):
    """A request for a model the price table does not have."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.model = model

    def __str__(self) -> str:
        known = ", ".join(sorted(PRICES))
        return f"no price for model {self.model!r} (priced: {known}): add it to PRICES"


@dataclass(frozen=True)
class BillingEvent:
    """What one upstream request costs."""

    id: str
    model: str
    outcome: str
    prompt_tokens: int
    completion_tokens: int
    source: Source
    cost_usd: float


def _price(model: str, prices: Mapping[str, Price]) -> Price:
    try:
        return prices[model]
    except KeyError:
        raise UnknownModelError(model) from None


def _billable(record: Mapping[str, Any]) -> bool:
    return int(record.get("status_code", 200)) < 400


def bill(
    lines: Iterable[Mapping[str, Any]],
    books: Iterable[Mapping[str, Any]],
    prices: Mapping[str, Price] = PRICES,
) -> list[BillingEvent]:
    """One billing event per billable request in ``books`` (the provider's records), with
    the counts of its usage line when the stream carried them."""
    records = {str(r["id"]): r for r in books}
    events: list[BillingEvent] = []
    named: set[str] = set()
    for line in lines:
        record = records.get(str(line.get("id")))
        if record is None or not _billable(record):
            continue
        named.add(record["id"])
        model = str(record.get("model", ""))
        if line.get("completion_tokens") is not None:
            prompt, completion = int(line["prompt_tokens"]), int(line["completion_tokens"])
            source: Source = "stream"
        else:
            prompt, completion = int(record["prompt_tokens"]), int(record["tokens_generated"])
            source = "provider"
        cost = _price(model, prices).cost(prompt, completion)
        events.append(
            BillingEvent(
                record["id"], model, str(line["outcome"]), prompt, completion, source, cost
            )
        )
    for record in records.values():
        if record["id"] in named or not _billable(record):
            continue
        model = str(record.get("model", ""))
        prompt, completion = int(record["prompt_tokens"]), int(record["tokens_generated"])
        cost = _price(model, prices).cost(prompt, completion)
        events.append(
            BillingEvent(record["id"], model, "cancelled", prompt, completion, "books only", cost)
        )
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
    events: Iterable[BillingEvent],
    books: Iterable[Mapping[str, Any]],
    prices: Mapping[str, Price] = PRICES,
) -> Reconciliation:
    """Add up the bill and the books (prompt plus generated tokens, and their price)."""
    events = list(events)
    billable = [r for r in books if _billable(r)]
    return Reconciliation(
        billed_tokens=sum(e.prompt_tokens + e.completion_tokens for e in events),
        books_tokens=sum(int(r["prompt_tokens"]) + int(r["tokens_generated"]) for r in billable),
        billed_usd=sum(e.cost_usd for e in events),
        books_usd=sum(
            _price(str(r.get("model", "")), prices).cost(
                int(r["prompt_tokens"]), int(r["tokens_generated"])
            )
            for r in billable
        ),
    )
