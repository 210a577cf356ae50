"""Billing that reconciles: streams through the reference proxy (real uvicorn, real sockets)
that complete, error, drop, are cancelled (also before the first token) and are refused; their
usage lines, priced with the per-model table, add up against the mock's books."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labkit import MockUpstream, capture_stream, serve
from labkit.servers import ServerHandle
from solutions import proxy as reference
from solutions.billing import PRICES, UnknownModelError, reconcile, reconciled_bill

CHAT = "/v1/chat/completions"
PACE = {"ttft_ms": 50, "tps": 40, "tokens": 30}


@pytest.fixture
def proxy(
    mock: ServerHandle, usage_log: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerHandle]:
    monkeypatch.setenv("UPSTREAM_URL", mock.url)
    with serve(reference.app, name="billing-proxy") as server:
        yield server


def chat(model: str, seed: int, **scenario: object) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "How much did that answer cost?"}],
        "stream": True,
        "mock": {**PACE, **scenario, "seed": seed},
    }


def run_mix(proxy: ServerHandle) -> None:
    """Every way a stream can end, side by side."""
    runs: list[dict[str, Any]] = [
        {"json": chat("mock-gpt", 1)},
        {"json": chat("mock-claude", 2)},
        {"json": chat("mock-gpt", 3, error_after=5)},
        {"json": chat("mock-claude", 4, drop_after=7)},
        {"json": chat("mock-gpt", 5, tps=20), "disconnect_after_events": 3},
        {"json": chat("mock-claude", 6, ttft_ms=800), "disconnect_after_s": 0.2},
        {"json": chat("mock-gpt", 7, status=429)},
    ]
    with ThreadPoolExecutor(len(runs)) as pool:
        list(pool.map(lambda kwargs: capture_stream(proxy.url + CHAT, **kwargs), runs))


@pytest.mark.sockets
def test_the_bill_adds_up_against_the_books(
    proxy: ServerHandle, books: MockUpstream, usage_log: Path
) -> None:
    run_mix(proxy)
    assert books.wait_until_idle(timeout=5.0)
    records = books.requests()
    lines = [json.loads(line) for line in usage_log.read_text().splitlines()]
    events = reconciled_bill(lines, records)
    totals = reconcile(events, records)
    assert totals.token_difference == 0 and totals.usd_difference == 0
    assert len(events) == 6  # the 429 generated nothing and costs nothing
    sources = sorted(e["source"] for e in events)
    assert sources == ["books only", "provider", "provider", "provider", "stream", "stream"]
    by_id = {r["id"]: r for r in records}
    for event in events:
        assert event["completion_tokens"] == by_id[event["id"]]["tokens_generated"]


@pytest.mark.sockets
def test_without_the_books_the_unknown_counts_would_be_billed_as_nothing(
    proxy: ServerHandle, books: MockUpstream, usage_log: Path
) -> None:
    run_mix(proxy)
    assert books.wait_until_idle(timeout=5.0)
    lines = [json.loads(line) for line in usage_log.read_text().splitlines()]
    from_lines_only = sum(line["completion_tokens"] or 0 for line in lines)
    generated = sum(r["tokens_generated"] for r in books.requests())
    assert from_lines_only == 2 * PACE["tokens"]  # only the two completed streams
    assert generated > from_lines_only + 5 + 7  # the error, the drop and the cancels generated


def test_prices_are_per_million_tokens_by_model() -> None:
    record = {
        "id": "x",
        "model": "mock-claude",
        "status_code": 200,
        "prompt_tokens": 10,
        "tokens_generated": 20,
    }
    line = {"id": "x", "outcome": "error", "prompt_tokens": None, "completion_tokens": None}
    [event] = reconciled_bill([line], [record])
    assert PRICES["mock-claude"] == {"input": 3.00, "output": 15.00}
    assert event["usd"] == pytest.approx((10 * 3.00 + 20 * 15.00) / 1_000_000)
    assert (event["source"], event["completion_tokens"]) == ("provider", 20)


def test_a_refused_request_costs_nothing() -> None:
    record = {
        "id": "x",
        "model": "mock-gpt",
        "status_code": 429,
        "prompt_tokens": 10,
        "tokens_generated": 0,
    }
    assert reconciled_bill([], [record]) == []


def test_an_unpriced_model_says_what_to_do() -> None:
    record = {
        "id": "x",
        "model": "gpt-9",
        "status_code": 200,
        "prompt_tokens": 1,
        "tokens_generated": 1,
    }
    with pytest.raises(UnknownModelError, match=r"no price for model 'gpt-9'.*add it to PRICES"):
        reconciled_bill([], [record])
