"""The token schedule and the fault strategies, without a server."""

from __future__ import annotations

import asyncio
import time

from mock_upstream.events import Delta, Dropped, Event, Failed, Finished, Malformed, Opened
from mock_upstream.pacing import Clock, faults_for, play
from mock_upstream.plan import Prompt, build_plan
from mock_upstream.scenario import Scenario

PROMPT = Prompt(text="Tell me about streaming.", model="mock-gpt")


def run(scenario: Scenario, prompt: Prompt = PROMPT) -> tuple[list[Event], float]:
    async def main() -> tuple[list[Event], float]:
        plan = build_plan(prompt, scenario)
        clock = Clock(scenario.ttft_ms / 1000, scenario.tps)
        started = time.perf_counter()
        events = [e async for e in play(plan, clock, faults_for(scenario))]
        return events, time.perf_counter() - started

    return asyncio.run(main())


def tokens_before(events: list[Event], kind: type) -> int:
    count = 0
    for event in events:
        if isinstance(event, kind):
            return count
        if isinstance(event, Delta):
            count += event.tokens
    raise AssertionError(f"no {kind.__name__} event")


FAST = Scenario(ttft_ms=0, tps=100_000, tokens=30)


def test_a_normal_answer_opens_streams_every_token_and_finishes() -> None:
    events, _ = run(FAST)
    assert isinstance(events[0], Opened)
    assert isinstance(events[-1], Finished)
    assert events[-1].reason == "stop"
    assert events[-1].usage.completion_tokens == 30 == tokens_before(events, Finished)


def test_faults_fire_after_exactly_n_tokens_even_inside_a_chunk() -> None:
    for after in range(0, 12):
        events, _ = run(Scenario(ttft_ms=0, tps=100_000, tokens=30, error_after=after))
        assert tokens_before(events, Failed) == after
        assert isinstance(events[-1], Failed)


def test_drop_is_terminal_and_a_malformed_frame_is_not() -> None:
    events, _ = run(Scenario(ttft_ms=0, tps=100_000, tokens=30, drop_after=5, malformed_after=5))
    kinds = [type(e) for e in events]
    assert kinds[-2:] == [Malformed, Dropped]
    events, _ = run(Scenario(ttft_ms=0, tps=100_000, tokens=30, malformed_after=5))
    assert isinstance(events[-1], Finished)
    assert tokens_before(events, Malformed) == 5


def test_a_fault_past_the_end_never_fires() -> None:
    events, _ = run(Scenario(ttft_ms=0, tps=100_000, tokens=10, error_after=11))
    assert isinstance(events[-1], Finished)


def test_refusal_finishes_with_the_tokens_sent_so_far() -> None:
    events, _ = run(Scenario(ttft_ms=0, tps=100_000, tokens=30, refusal_after=7))
    last = events[-1]
    assert isinstance(last, Finished)
    assert (last.reason, last.usage.completion_tokens) == ("refusal", 7)


def test_ttft_and_tps_set_the_duration() -> None:
    # first token at 100 ms, then 9 more at 50 tokens/s: 100 + 180 ms
    _, elapsed = run(Scenario(ttft_ms=100, tps=50, tokens=10))
    assert 0.27 <= elapsed < 1.0


def test_a_stall_pushes_later_tokens_back() -> None:
    _, elapsed = run(Scenario(ttft_ms=0, tps=1000, tokens=10, stall_after=5, stall_s=0.3))
    assert 0.3 <= elapsed < 1.0


def test_max_tokens_truncates_the_plan_with_finish_length() -> None:
    plan = build_plan(Prompt(text="x", model="m", max_tokens=4), Scenario(tokens=30))
    assert (plan.finish, plan.completion_tokens) == ("length", 4)


def test_an_error_at_zero_comes_before_the_answer_opens() -> None:
    events, _ = run(Scenario(ttft_ms=0, tps=100_000, tokens=30, error_after=0))
    assert [type(e) for e in events] == [Failed]


def test_comments_fall_due_on_their_own_schedule_before_and_after_a_token() -> None:
    scenario = Scenario(ttft_ms=250, tps=10, tokens=1, comment_every_ms=100)
    plan = build_plan(PROMPT, scenario)

    async def main() -> list[str]:
        clock = Clock(0.25, 10, comment_every_s=0.1)
        stall = faults_for(Scenario(stall_after=1, stall_s=0.2))
        return [type(e).__name__ async for e in play(plan, clock, stall)]

    kinds = [k for k in asyncio.run(main()) if k in ("Comment", "Delta", "Finished")]
    # comments at 100, 200 ms | the token at 250 | a stall to 450: comments at 300, 400 (a stall
    # to 500 would tie with the comment due then, and float sums break the tie either way)
    assert kinds == ["Comment", "Comment", "Delta", "Comment", "Comment", "Finished"]
