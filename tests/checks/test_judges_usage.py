"""``usage`` judges the usage log against what it sent, in process: one line per request, each
outcome, each count exact (one token off fails), lines that are not JSON, usage sent only to
the clients that asked, the order problems are named in, and a request whose id the client never
saw. (The experiment runs over real sockets in the grader's mutation table and in
tests/grading/test_engine_checks.py.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from labkit.checks.machine import Budget
from labkit.checks.usage import ASKING, NO_LOG, REQUESTS, UNASKED, Observed, Sent, judge

ONE_CPU = Budget(cpus=1.0)

PROMPT, COMPLETION = 14, 30


def truth(completion: int = COMPLETION) -> dict[str, int | None]:
    return {
        "prompt_tokens": PROMPT,
        "completion_tokens": completion,
        "total_tokens": PROMPT + completion,
    }


def sent_all() -> tuple[Sent, ...]:
    sent = []
    for name, (_, _, outcome) in REQUESTS.items():
        asked = True if name in ASKING else False if name in UNASKED else None
        counts = truth() if outcome == "completed" else None
        sent.append(Sent(name, f"chatcmpl-{name}", outcome, counts, asked, asked is True))
    return tuple(sent)


def line(one: Sent, **changes: Any) -> Mapping[str, Any]:
    counts = one.truth or {"prompt_tokens": PROMPT, "completion_tokens": None}
    return {"id": one.id, "outcome": one.outcome, **counts, **changes}


def observed(
    sent: tuple[Sent, ...] | None = None, lines: list[Mapping[str, Any]] | None = None, bad: int = 0
) -> Observed:
    sent = sent_all() if sent is None else sent
    return Observed(sent, tuple(lines if lines is not None else [line(s) for s in sent]), bad)


def test_one_true_line_per_request_passes_with_its_evidence() -> None:
    result = judge(observed(), ONE_CPU)
    assert result.passed
    assert result.verdict == (
        "the usage log has the upstream's counts once per request with the right outcome"
    )
    evidence = result.evidence
    assert (evidence["log_lines"], evidence["bad_lines"]) == (6, 0)
    assert evidence["asked_completion_tokens"] == evidence["asked_completion_tokens_upstream"] == 30
    assert evidence["cancelled_outcome"] == "cancelled"
    assert "cancelled_total_tokens" not in evidence
    assert evidence["unasked_client_got_usage"] is False
    assert "errored_client_got_usage" not in evidence


@pytest.mark.parametrize("off", [-1, 1])
def test_a_count_one_token_off_fails(off: int) -> None:
    sent = sent_all()
    lines = [line(s) for s in sent]
    lines[1] = line(sent[1], completion_tokens=COMPLETION + off)
    result = judge(observed(sent, lines), ONE_CPU)
    assert result.verdict == "the usage log's token counts differ from the upstream's"
    assert result.hint.startswith("05_usage_capture: take prompt_tokens")


def test_an_estimate_for_a_cancelled_or_failed_request_is_accepted() -> None:
    sent = sent_all()
    estimated = [line(s, completion_tokens=11, total_tokens=25) for s in sent[2:4]]
    lines = [line(sent[0]), line(sent[1]), *estimated, *map(line, sent[4:])]
    assert judge(observed(sent, lines), ONE_CPU).passed


@pytest.mark.parametrize("copies", [0, 2])
def test_anything_but_one_line_for_a_request_fails(copies: int) -> None:
    sent = sent_all()
    lines = [line(s) for s in sent if s.name != "errored"] + [line(sent[3])] * copies
    result = judge(observed(sent, lines), ONE_CPU)
    assert result.verdict == "the usage log does not have exactly one line per request"
    assert result.evidence["errored_lines"] == copies


def test_a_wrong_outcome_fails() -> None:
    sent = sent_all()
    lines = [line(s, outcome="completed") if s.name == "cancelled" else line(s) for s in sent]
    result = judge(observed(sent, lines), ONE_CPU)
    assert result.verdict == "the usage log records the wrong outcome for some requests"


def test_a_line_that_is_not_a_json_object_fails() -> None:
    result = judge(observed(bad=1), ONE_CPU)
    assert result.verdict == "the usage log has lines that are not JSON objects"


def test_usage_kept_from_a_client_that_asked_fails() -> None:
    sent = tuple(
        replace(s, got_usage=False) if s.name == "on_choices_asked" else s for s in sent_all()
    )
    result = judge(observed(sent), ONE_CPU)
    assert result.verdict == "a client that asked for usage did not get the usage chunk"
    assert result.evidence["on_choices_asked_client_got_usage"] is False


def test_usage_sent_to_a_client_that_did_not_ask_fails() -> None:
    sent = tuple(
        replace(s, got_usage=True) if s.name == "on_choices_unasked" else s for s in sent_all()
    )
    result = judge(observed(sent), ONE_CPU)
    assert result.verdict == "a client that did not ask for usage got the usage chunk"


def test_the_first_problem_found_is_named_request_by_request_then_format_then_usage() -> None:
    sent = tuple(replace(s, got_usage=True) if s.name == "unasked" else s for s in sent_all())
    wrong_first = [line(sent[0], completion_tokens=1), *map(line, sent[1:5])]
    result = judge(observed(sent, wrong_first, bad=2), ONE_CPU)
    assert result.verdict == "the usage log's token counts differ from the upstream's"
    missing_first = [*map(line, sent[1:5]), line(sent[5], completion_tokens=1)]
    result = judge(observed(sent, missing_first, bad=2), ONE_CPU)
    assert result.verdict == "the usage log does not have exactly one line per request"
    assert judge(observed(sent, bad=2), ONE_CPU).verdict == (
        "the usage log has lines that are not JSON objects"
    )


def test_a_request_whose_id_the_client_never_saw_takes_the_line_no_other_claims() -> None:
    sent = (
        Sent("asked", "chatcmpl-a", "completed", truth(), True, True),
        Sent("cancelled", None, "cancelled"),
    )
    lines = [line(sent[0]), {"id": "chatcmpl-c", "outcome": "cancelled"}]
    assert judge(observed(sent, lines), ONE_CPU).passed
    doubled = [*lines, {"id": None, "outcome": "cancelled"}]
    assert not judge(observed(sent, doubled), ONE_CPU).passed


def test_requests_that_never_reached_the_upstream_fail_by_name() -> None:
    result = judge(Observed(missing=("cancelled", "errored")), ONE_CPU)
    assert result.verdict == "some requests never reached the upstream"
    assert dict(result.evidence) == {"missing": "cancelled,errored"}
    assert result.hint.startswith("02_forwarding_proxy:")


def test_no_usage_log_is_skipped() -> None:
    result = judge(NO_LOG, ONE_CPU)
    assert result.status == "skipped" and result.outcome == "skipped"
    assert result.verdict == "skipped: no usage log to read"
