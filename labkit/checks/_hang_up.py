"""What the cancellation checks share: a client that hangs up, and the upstream's record of how
soon it stopped.

``cancel``, ``cancel_before_first_token``, ``cancel_queued``, ``cancel_whole_answer`` and
notebook 15's ``resume_stop`` each hang up (or send Stop) and read when the mock's record ended:
every one of them is judged against MAX_STOP_S from the client's hang-up, and counts the tokens
made after it from the mock's fixed clock. No check of its own (no ``ID``).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.capture import acapture_stream
from labkit.checks.context import CheckContext, Record, chat_body, finished, ms
from labkit.upstream import tokens_after_hang_up

__all__ = [
    "ENGINE_IDLE_WAIT_S",
    "ENGINE_NOTICE_S",
    "LIMIT_S",
    "MAX_STOP_S",
    "WAIT_S",
    "HungUp",
    "hang_up",
    "hang_up_evidence",
    "stop_after_hang_up_ms",
    "stopped_in_time",
    "tokens_after_hang_up",
]

MAX_STOP_S = 1.0  # from the client's hang-up to the upstream's stop: a verdict's bound
WAIT_S = 2.0  # how long the record is watched after the hang-up, at one CPU
LIMIT_S = 10.0  # the client's read timeout, at one CPU (it hangs up long before)
ENGINE_IDLE_WAIT_S = 30.0  # for the engine to finish what a broken proxy left running
ENGINE_NOTICE_S = 2.5  # without its sockets: the engine's own second, and the sparse reads


@dataclass(frozen=True)
class HungUp:
    """What one hang-up from the mock showed: when the client left (the clock of the mock's
    records) and the mock's record of the request as it ended up (None: it never arrived)."""

    hung_up_at: float
    record: Record | None


async def hang_up(ctx: CheckContext, seed: int, scenario: dict[str, int], after_s: float) -> HungUp:
    """Stream, hang up after ``after_s``; return the hang-up time and the record as it ends up
    (watched for WAIT_S, stretched with the run's budget)."""
    capture = await acapture_stream(
        ctx.chat_url,
        json=chat_body(seed, scenario),
        disconnect_after_s=after_s,
        timeout=ctx.budget.stretch(LIMIT_S),
    )
    hung_up_at = capture.started_at + capture.total_time
    record = await ctx.record(seed, until=finished, wait_s=ctx.budget.stretch(WAIT_S))
    return HungUp(hung_up_at, record)


def stop_after_hang_up_ms(record: Record, hung_up_at: float) -> int | None:
    """How long after the hang-up the upstream's record ended, in ms (None: not ended)."""
    stopped = record.get("ended_at") if finished(record) else None
    # clocks a millisecond apart can put the stop a hair before the hang-up: that is 0
    return None if stopped is None else max(0, ms(stopped - hung_up_at) or 0)


def hang_up_evidence(hung_up_at: float, record: Record) -> dict[str, int | str | None]:
    """The record's state, how soon it stopped and the tokens it made, after and in all."""
    return {
        "upstream_state": record.get("state"),
        "upstream_stop_after_hangup_ms": stop_after_hang_up_ms(record, hung_up_at),
        "tokens_generated": record.get("tokens_generated"),
        "tokens_after_hang_up": tokens_after_hang_up(record, hung_up_at),
    }


def stopped_in_time(record: Record, hung_up_at: float) -> bool:
    """The record ended ``cancelled`` within MAX_STOP_S of the hang-up."""
    ended = record.get("ended_at")
    return (
        record.get("state") == "cancelled"
        and ended is not None
        and ended - hung_up_at <= MAX_STOP_S
    )
