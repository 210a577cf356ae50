"""The settings a check needs its proxy started with (its module's ``PROXY_ENV``): notebook 15's
grace period and replay bound. The grader starts each lane's proxy with its checks' settings, so
checks that need different values sit in different lanes; graded by URL, where the settings are
not the grader's to choose, those checks are not run, saying which settings they need."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.checks.catalogue import BY_ID, CHECK_IDS, LANES, proxy_env_for
from labkit.checks.replay_bound import BOUND
from labkit.checks.resume_grace import GRACE_S
from labkit.checks.resume_stop import GRACE_S as STOP_GRACE_S
from labkit.grading.grader import agrade_file, agrade_url, needs_settings
from labkit.servers import ServerHandle

ROOT = Path(__file__).resolve().parents[2]
NEEDS_SETTINGS = {"resume_stop", "resume_grace", "replay_bound"}


def test_the_checks_bounds_and_the_settings_the_grader_gives_agree() -> None:
    assert {i for i in CHECK_IDS if BY_ID[i].proxy_env} == NEEDS_SETTINGS
    assert proxy_env_for(["resume_stop"]) == {"RESUME_GRACE_S": f"{STOP_GRACE_S:g}"}
    assert proxy_env_for(["resume_grace"]) == {"RESUME_GRACE_S": f"{GRACE_S:g}"}
    assert proxy_env_for(["replay_bound"]) == {"REPLAY_EVENTS": str(BOUND)}
    assert proxy_env_for(["trickle", "resume"]) == {}


def test_every_lane_s_checks_can_share_one_proxy() -> None:
    for lane in LANES:
        proxy_env_for(lane)  # raises for a lane whose checks need different values
    assert proxy_env_for(["replay_bound", "resume_grace"]) == {
        "REPLAY_EVENTS": str(BOUND),
        "RESUME_GRACE_S": f"{GRACE_S:g}",
    }


def test_checks_that_need_different_values_of_one_setting_are_named() -> None:
    with pytest.raises(ValueError) as raised:
        proxy_env_for(["resume_stop", "resume_grace"])
    assert str(raised.value) == (
        "Expected checks that can share one proxy; got resume_stop with RESUME_GRACE_S=30 and "
        "resume_grace with RESUME_GRACE_S=3. Run them against proxies of their own, each "
        "started with proxy_env_for(its checks)."
    )


def test_graded_by_url_the_checks_that_need_settings_are_skipped_saying_which() -> None:
    skipped = needs_settings(CHECK_IDS)
    assert set(skipped) == NEEDS_SETTINGS
    grace = skipped["resume_grace"]
    assert grace.skipped and not grace.passed
    assert str(grace) == (
        "SKIP resume_grace: not run by URL: needs the proxy started with RESUME_GRACE_S=3"
    )
    assert grace.hint == "grade the proxy file, which the grader starts with these settings."


@pytest.mark.sockets
@pytest.mark.slow
def test_each_lane_s_proxy_starts_with_its_checks_settings() -> None:
    """resume_stop needs a grace of 30 s and resume_grace one of 3 s: only proxies of their own,
    each with its lane's settings, pass both (the reference's default is 10 s)."""
    report = asyncio.run(
        agrade_file(ROOT / "solutions" / "proxy.py", only=["resume_stop", "resume_grace"])
    )
    assert report.problem is None
    assert [(r.id, r.status) for r in report.results] == [
        ("resume_stop", "passed"),
        ("resume_grace", "passed"),
    ], [dict(r.evidence) for r in report.results]
    assert report.results[1].evidence["resume_grace_s"] == GRACE_S


@pytest.mark.sockets
def test_a_proxy_graded_by_url_runs_only_the_resume_checks_that_need_no_settings(
    reference_proxy: ServerHandle, mock: ServerHandle
) -> None:
    ids = ["resume", "resume_twice", *sorted(NEEDS_SETTINGS)]
    report = asyncio.run(agrade_url(reference_proxy.url, mock.url, only=ids))
    outcomes = {r.id: r.status for r in report.results}
    assert outcomes == {
        "resume": "passed",
        "resume_twice": "passed",
        **dict.fromkeys(NEEDS_SETTINGS, "skipped"),
    }, [str(r) for r in report.results]
    assert [r.id for r in report.results] == [i for i in CHECK_IDS if i in ids]
