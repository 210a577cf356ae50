"""``cancel``'s evidence has one meaning per key: tokens are counted from the client's hang-up
(a gateway may tell the upstream seconds later), and a stop a hair before the hang-up on two
clocks is 0 ms, never a negative number that reads like a sentinel."""

from __future__ import annotations

from labkit.checks._hang_up import hang_up_evidence
from labkit.upstream import tokens_after_hang_up


def record(first: float | None, generated: int, ended: float, tps: float = 20) -> dict[str, object]:
    return {
        "state": "cancelled",
        "scenario": {"tps": tps},
        "first_token_at": first,
        "tokens_generated": generated,
        "ended_at": ended,
    }


def test_tokens_are_counted_from_the_clients_hang_up_not_the_upstreams_notice() -> None:
    # first token at 100.0, then 20 a second: by the hang-up at 101.2, 25 tokens were due; a
    # gateway that told the upstream 1.3 s later let it make 26 more (51 in all)
    assert tokens_after_hang_up(record(100.0, 51, 102.5), hung_up_at=101.2) == 26
    assert tokens_after_hang_up(record(100.0, 25, 101.21), hung_up_at=101.2) == 0


def test_a_hang_up_before_the_first_token_counts_every_token_made() -> None:
    assert tokens_after_hang_up(record(101.5, 3, 101.7), hung_up_at=100.4) == 3
    assert tokens_after_hang_up(record(None, 0, 100.41), hung_up_at=100.4) == 0


def test_a_stop_a_hair_before_the_hang_up_is_zero_ms() -> None:
    evidence = hang_up_evidence(101.2, record(100.0, 25, 101.1995))
    assert evidence["upstream_stop_after_hangup_ms"] == 0
    assert evidence["tokens_after_hang_up"] == 0
