"""One parser for the header and the body field; errors name the source, key and expectation."""

from __future__ import annotations

import pytest

from mock_upstream.scenario import (
    Scenario,
    ScenarioError,
    parse_body,
    parse_header,
    resolve,
)


def test_defaults_match_the_contract() -> None:
    scenario = Scenario()
    assert (scenario.ttft_ms, scenario.tps, scenario.tokens, scenario.stall_s) == (
        200,
        25.0,
        48,
        30.0,
    )
    assert scenario.seed is None and scenario.status is None and scenario.error_after is None


def test_header_values_are_converted_to_the_field_types() -> None:
    assert parse_header(" ttft_ms=5 ; tps=12.5;;status=429 ") == {
        "ttft_ms": 5,
        "tps": 12.5,
        "status": 429,
    }


def test_body_wins_over_header_which_wins_over_defaults() -> None:
    defaults = Scenario(ttft_ms=1, tps=2, tokens=3)
    scenario = resolve(defaults, "ttft_ms=10;tps=20", {"ttft_ms": 100})
    assert (scenario.ttft_ms, scenario.tps, scenario.tokens) == (100, 20.0, 3)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("ttft=5", "X-Mock-Scenario: unknown key 'ttft': expected one of ttft_ms, tps, "),
        ("tps=0", "X-Mock-Scenario: tps='0' is not valid: expected a number > 0"),
        ("tps=nan", "X-Mock-Scenario: tps='nan' is not valid: expected a number > 0"),
        ("tokens=0", "X-Mock-Scenario: tokens='0' is not valid: expected an integer >= 1"),
        ("status=404", "X-Mock-Scenario: status='404' is not valid: expected one of 429, 500, "),
        ("ttft_ms", "X-Mock-Scenario: 'ttft_ms' is not a key=value pair: write e.g. "),
        ("error_after=-1", "X-Mock-Scenario: error_after='-1' is not valid: expected an integer"),
    ],
)
def test_bad_header_raises_a_scenario_error_naming_the_key(header: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_header(header)
    assert str(caught.value).startswith(message)


def test_body_rejects_booleans_and_non_objects() -> None:
    with pytest.raises(ScenarioError, match=r"^mock: ttft_ms=True is not valid") as caught:
        parse_body({"ttft_ms": True})
    assert caught.value.param == "mock.ttft_ms"
    with pytest.raises(ScenarioError, match=r"^mock: expected an object"):
        parse_body([1])


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ScenarioError, match=r"^Scenario: stall_s=-1"):
        Scenario(stall_s=-1)
    assert Scenario(tps=10).tps == 10.0


def test_changed_lists_only_the_keys_that_differ_from_the_defaults() -> None:
    assert Scenario(tps=5, error_after=2).changed() == {"tps": 5.0, "error_after": 2}


def test_pause_on_backpressure_is_off_unless_asked_for_and_checked_like_any_boolean() -> None:
    assert Scenario().pause_on_backpressure is False
    assert resolve(Scenario(), "pause_on_backpressure=on", None).pause_on_backpressure is True
    assert resolve(Scenario(), None, {"pause_on_backpressure": True}).changed() == {
        "pause_on_backpressure": True
    }
    with pytest.raises(ScenarioError) as caught:
        parse_body({"pause_on_backpressure": "sometimes"})
    assert str(caught.value) == (
        "mock: pause_on_backpressure='sometimes' is not valid: expected true or false (1 or 0)"
    )


def test_slots_is_unlimited_unless_asked_for_and_at_least_one() -> None:
    assert Scenario().slots is None
    assert resolve(Scenario(), "slots=2", None).slots == 2
    assert resolve(Scenario(slots=4), None, {"slots": 1}).changed() == {"slots": 1}
    with pytest.raises(ScenarioError) as caught:
        parse_body({"slots": 0})
    assert str(caught.value) == "mock: slots=0 is not valid: expected an integer >= 1"
