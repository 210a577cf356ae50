"""``content_encoding`` reads and judges what its two clients got, in process: ``read_answer`` on
constructed captures (gzip bytes under no ``Content-Encoding``, a plain chat completion, a body
the identity client got declared as gzip, bodies that are not completions) and the judge's every
verdict and its evidence. Nothing is timed. (The experiment runs over real sockets in the
grader's mutation table: ``raw_whole_answer`` passes the client's Accept-Encoding upstream and
relays the raw gzip bytes without their ``Content-Encoding``.)"""

from __future__ import annotations

import gzip
import json

import pytest

from labkit.capture import Capture
from labkit.checks.encoding import Answer, Observed, judge, read_answer
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ONE_CPU = Budget(cpus=1.0)

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}}],
    }
).encode()
JSON = {"content-type": "application/json"}
PASSED = "whole answers reach the client readable, whatever encoding it accepts"
UNDECLARED_GZIP = "a whole answer reached the client as gzip its headers do not declare"
COMPRESSED = "a client that accepts only identity got a compressed answer"
UNREADABLE = "a whole answer reached the client in a form it cannot read"


def capture(body: bytes, headers: dict[str, str] = JSON, status: int | None = 200) -> Capture:
    """A whole answer as ``labkit.capture`` leaves it: ``body`` already decoded as the headers
    declare."""
    return Capture(
        "http://proxy/v1/chat/completions", status=status, headers=dict(headers), body=body
    )


def answer(
    declared: str = "",
    *,
    readable: bool = True,
    gzip_inside: bool = False,
    status: int | None = 200,
) -> Answer:
    return Answer(status, declared, readable, gzip_inside)


def seen(gzip_client: Answer | None = None, identity_client: Answer | None = None) -> Observed:
    return Observed(gzip_client or answer("gzip"), identity_client or answer())


# read_answer -------------------------------------------------------------------------------------


def test_read_answer_finds_gzip_bytes_under_no_content_encoding_unreadable() -> None:
    assert read_answer(capture(gzip.compress(COMPLETION))) == Answer(200, "", False, True, "")


def test_read_answer_reads_a_plain_chat_completion() -> None:
    assert read_answer(capture(COMPLETION)) == Answer(200, "", True, False, "")


def test_read_answer_reports_the_encoding_the_identity_client_was_given() -> None:
    given = capture(COMPLETION, {**JSON, "content-encoding": " GZip "})
    assert read_answer(given) == Answer(200, "gzip", True, False, "")


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b'{"error": {"message": "upstream failed"}}', b'[{"choices": []}]'],
    ids=["empty", "text", "error-object", "list"],
)
def test_read_answer_reads_only_a_json_object_with_choices_as_a_completion(body: bytes) -> None:
    assert not read_answer(capture(body)).readable


def test_read_answer_keeps_the_status_and_the_transport_error() -> None:
    broken = capture(b"", status=None)
    broken.transport_error = "bad compressed body: incorrect header check"
    assert read_answer(broken) == Answer(
        None, "", False, False, "bad compressed body: incorrect header check"
    )


# judge -------------------------------------------------------------------------------------------


def test_readable_answers_to_both_clients_pass_with_their_evidence() -> None:
    result = judge(seen(), ONE_CPU)
    assert result.passed
    assert result.verdict == PASSED
    assert result.hint == "see 06_midstream_errors"
    assert dict(result.evidence) == {
        "gzip_client_status": 200,
        "gzip_client_declared_encoding": "gzip",
        "gzip_client_body_readable": True,
        "gzip_client_got_gzip_bytes": False,
        "identity_client_status": 200,
        "identity_client_declared_encoding": None,
        "identity_client_body_readable": True,
        "identity_client_got_gzip_bytes": False,
    }


def test_plain_answers_to_both_clients_pass() -> None:
    assert judge(seen(answer(), answer()), ONE_CPU).passed


def test_an_identity_client_told_identity_passes() -> None:
    assert judge(seen(identity_client=answer("identity")), ONE_CPU).passed


def test_raw_gzip_relayed_without_its_encoding_fails_as_undeclared_gzip() -> None:
    raw = read_answer(capture(gzip.compress(COMPLETION)))
    result = judge(seen(gzip_client=raw), ONE_CPU)
    assert result.status == "failed"
    assert result.verdict == UNDECLARED_GZIP
    assert result.evidence["gzip_client_got_gzip_bytes"] is True
    assert result.evidence["gzip_client_declared_encoding"] is None
    assert result.hint.startswith("06_midstream_errors: do not pass the client's Accept-Encoding")
    assert "aread()" in result.hint


def test_undeclared_gzip_is_named_before_a_compressed_identity_answer() -> None:
    raw = answer(readable=False, gzip_inside=True)
    assert judge(seen(raw, answer("gzip")), ONE_CPU).verdict == UNDECLARED_GZIP


def test_an_identity_client_given_gzip_fails_even_when_its_body_was_readable() -> None:
    given = read_answer(capture(COMPLETION, {**JSON, "content-encoding": "gzip"}))
    result = judge(seen(identity_client=given), ONE_CPU)
    assert result.verdict == COMPRESSED
    assert result.evidence["identity_client_declared_encoding"] == "gzip"
    assert result.hint.endswith(
        "send the decoded answer, with no Content-Encoding of the upstream's."
    )


def test_decoded_bytes_under_the_upstream_encoding_fail_as_unreadable() -> None:
    copied = answer("gzip", readable=False)
    result = judge(seen(gzip_client=copied), ONE_CPU)
    assert result.verdict == UNREADABLE
    assert "without copying the upstream's Content-Encoding" in result.hint


@pytest.mark.parametrize("status", [502, None])
def test_an_error_status_fails_before_anything_is_decoded(status: int | None) -> None:
    result = judge(
        seen(identity_client=answer(readable=False, gzip_inside=True, status=status)), ONE_CPU
    )
    assert result.verdict == "a whole answer came back with an error status"
    assert result.evidence["identity_client_status"] == status
    assert result.hint.startswith("06_midstream_errors: forward non-streamed requests too")


def test_no_verdict_holds_a_digit() -> None:
    results: list[CheckResult] = [
        judge(seen(), ONE_CPU),
        judge(seen(gzip_client=answer(readable=False, gzip_inside=True)), ONE_CPU),
        judge(seen(identity_client=answer("gzip")), ONE_CPU),
        judge(seen(gzip_client=answer("gzip", readable=False)), ONE_CPU),
        judge(seen(gzip_client=answer(status=500)), ONE_CPU),
    ]
    for result in results:
        assert not any(c.isdigit() for c in result.verdict), result.verdict
