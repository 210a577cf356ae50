"""``tool_calls`` judges the calls the SDK assembled against the upstream's own, in process: every
verdict, in the order a learner should read them. (The experiment runs over real sockets in the
grader's mutation table: ``tool_index_zero``.)"""

from __future__ import annotations

from typing import Any

from labkit.checks.machine import Budget
from labkit.checks.tool_calls import Observed, judge

ONE_CPU = Budget(cpus=1.0)

WEATHER = ("call_a", "get_weather", {"city": "Oslo", "days": 3})
TIME = ("call_b", "get_time", {"zone": "CET"})
EXPECTED = (WEATHER, TIME)


def seen(*calls: tuple[str, str, Any], ending: str = "finished") -> Observed:
    return Observed(EXPECTED, ending, calls)


def test_both_calls_assembled_as_the_upstream_made_them_pass() -> None:
    result = judge(seen(WEATHER, TIME), ONE_CPU)
    assert result.passed
    assert result.verdict == (
        "parallel tool calls keep their own index and id; the SDK assembles both"
    )
    assert dict(result.evidence) == {
        "sdk_ending": "finished",
        "calls_expected": 2,
        "calls_assembled": 2,
        "names": "get_weather,get_time",
        "distinct_ids": 2,
        "arguments_parse": 2,
    }


def test_ids_are_the_proxys_to_keep_but_not_to_match() -> None:
    """The SDK's ids come from the stream; the upstream's unstreamed answer has ids of its own."""
    assert judge(seen(("x", *WEATHER[1:]), ("y", *TIME[1:])), ONE_CPU).passed


def test_calls_merged_into_one_fail() -> None:
    merged = ("call_acall_b", "get_weatherget_time", '{"city": "Oslo", "days": 3}{"zone": "CET"}')
    result = judge(seen(merged), ONE_CPU)
    assert result.verdict == "parallel tool calls were merged into fewer calls"
    assert result.evidence["arguments_parse"] == 0
    assert result.hint.startswith("09_tool_calls_and_partial_json: pass each tool-call delta")


def test_arguments_that_do_not_parse_fail() -> None:
    result = judge(seen(WEATHER, ("call_b", "get_time", '{"zone": "CE')), ONE_CPU)
    assert result.verdict == "a tool call's arguments do not parse as JSON after the proxy"


def test_calls_that_share_an_id_fail() -> None:
    result = judge(seen(WEATHER, ("call_a", *TIME[1:])), ONE_CPU)
    assert result.verdict == "parallel tool calls lost their distinct ids"
    assert result.evidence["distinct_ids"] == 1


def test_calls_out_of_order_or_with_other_arguments_differ() -> None:
    for calls in ((TIME, WEATHER), (WEATHER, ("call_b", "get_time", {"zone": "UTC"}))):
        assert (
            judge(seen(*calls), ONE_CPU).verdict
            == "the assembled tool calls differ from the upstream's"
        )


def test_a_stream_the_sdk_did_not_finish_is_named() -> None:
    assert judge(seen(ending="hung"), ONE_CPU).verdict == (
        "the stream hung while carrying parallel tool calls"
    )
    for ending in ("APIError", "ValueError"):
        assert judge(seen(ending=ending), ONE_CPU).verdict == (
            "the SDK could not read a stream carrying parallel tool calls"
        )
