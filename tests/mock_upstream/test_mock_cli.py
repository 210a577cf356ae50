"""The ``mock-upstream`` command line."""

from __future__ import annotations

import pytest

import mock_upstream
from mock_upstream.cli import build_parser, defaults_from, main


def test_flags_set_the_scenario_defaults() -> None:
    args = build_parser().parse_args(
        ["--ttft-ms", "5", "--tps", "80", "--tokens", "9", "--scenario", "stall_s=2;tps=1"]
    )
    assert (args.host, args.port) == ("127.0.0.1", 8001)
    defaults = defaults_from(args)
    assert (defaults.ttft_ms, defaults.tps, defaults.tokens, defaults.stall_s) == (5, 80.0, 9, 2.0)


def test_the_slots_flag_makes_every_request_share_that_many_slots_by_default() -> None:
    assert defaults_from(build_parser().parse_args(["--slots", "2"])).slots == 2
    assert defaults_from(build_parser().parse_args([])).slots is None  # unlimited


def test_a_slot_count_below_one_exits_with_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--slots", "0"])
    assert caught.value.code == 2
    assert "--slots: slots=0 is not valid: expected an integer >= 1" in capsys.readouterr().err


def test_no_flags_keep_the_contract_defaults() -> None:
    assert defaults_from(build_parser().parse_args([])) == mock_upstream.Scenario()


def test_a_bad_default_exits_with_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--tps", "0"])
    assert caught.value.code == 2
    assert "--tps: tps=0.0 is not valid: expected a number > 0" in capsys.readouterr().err


def test_public_api_is_sorted_and_importable() -> None:
    assert mock_upstream.__all__ == sorted(mock_upstream.__all__)
    for name in mock_upstream.__all__:
        assert getattr(mock_upstream, name) is not None
