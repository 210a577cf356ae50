"""``minute_stream`` judges what the client saw of a 67 s stream, in process: every verdict, and
the longest wait between bytes counts the wait after the last byte, where a client's idle limit
strikes. (The experiment runs over real sockets, for over a minute, in
test_gateway_profile.py.)"""

from __future__ import annotations

from labkit.checks.machine import Budget
from labkit.checks.minute_stream import CLIENT_IDLE_S, STALL_S, Observed, judge

ONE_CPU = Budget(cpus=1.0)

TOKENS = (0.5, 0.75, 8.25)  # the first, the next, the 32nd: then the upstream is silent
AFTER = (8.25 + STALL_S, 8.25 + STALL_S + 0.25, 66.5)


def seen(
    status: int | None = 200,
    terminal: str = "done",
    *,
    chunks: tuple[float, ...] = (*TOKENS, 20.0, 40.0, *AFTER),
    total: float = 66.6,
    transport_error: str | None = None,
    reached: bool = True,
) -> Observed:
    return Observed(
        status,
        terminal,
        total,
        64 if terminal == "done" else 32,
        TOKENS + AFTER if terminal == "done" else TOKENS,
        chunks,
        2,
        transport_error,
        reached,
        "completed" if reached else None,
        64 if reached else None,
    )


def test_a_stream_that_ends_with_done_passes_with_its_evidence() -> None:
    result = judge(seen(), ONE_CPU)
    assert result.passed
    assert result.verdict == (
        "a stream of more than a minute, silent for most of it, reaches the client"
    )
    assert dict(result.evidence) == {
        "status": 200,
        "terminal": "done",
        "client_total_ms": 66600,
        "tokens_received": 64,
        "upstream_tokens": 64,
        "upstream_state": "completed",
        "upstream_silence_ms": round(STALL_S * 1000),
        "client_idle_limit_ms": round(CLIENT_IDLE_S * 1000),
        "longest_gap_between_tokens_ms": round(STALL_S * 1000),
        "longest_gap_between_bytes_ms": 20000,  # between the two heartbeats
        "comments": 2,
        "transport_error": None,
    }


def test_the_wait_after_the_last_byte_counts_as_a_gap() -> None:
    result = judge(
        seen(
            terminal="truncated",
            chunks=TOKENS,
            total=8.25 + CLIENT_IDLE_S + 0.01,
            transport_error="ReadTimeout: timed out",
        ),
        ONE_CPU,
    )
    assert result.evidence["longest_gap_between_bytes_ms"] == round(CLIENT_IDLE_S * 1000 + 10)
    assert result.verdict == (
        "nothing reached the client for longer than its idle limit while the upstream was silent"
    )
    assert result.hint.startswith("07_heartbeats_and_timeouts: send an SSE comment")


def test_a_gateway_that_held_the_whole_response_timed_out_without_a_byte() -> None:
    held = Observed(None, "truncated", 30.0, 0, (), (), 0, "ReadTimeout: x", True)
    result = judge(held, ONE_CPU)
    assert result.evidence["longest_gap_between_bytes_ms"] == 30000
    assert result.evidence["longest_gap_between_tokens_ms"] is None
    assert result.verdict.startswith("nothing reached the client for longer than its idle limit")


def test_a_proxy_that_gave_up_on_the_upstream_is_named() -> None:
    result = judge(seen(terminal="error", chunks=(*TOKENS, 20.0, 38.3), total=38.3), ONE_CPU)
    assert result.verdict == "the proxy gave up on the upstream during its silence"
    assert "httpx.Timeout(read=...)" in result.hint


def test_a_cut_stream_is_named() -> None:
    for observed in (
        seen(terminal="truncated", chunks=(*TOKENS, 20.0, 40.0), total=60.0),
        seen(status=502, terminal="done"),
    ):
        assert judge(observed, ONE_CPU).verdict == "the stream was cut before it ended"


def test_a_request_that_never_reached_the_upstream_fails_with_its_evidence() -> None:
    result = judge(
        seen(status=404, terminal="truncated", chunks=(0.01,), total=0.01, reached=False), ONE_CPU
    )
    assert result.verdict == "the request never reached the upstream"
    assert result.hint.startswith("02_forwarding_proxy:")
    assert result.evidence["status"] == 404 and result.evidence["upstream_state"] is None
