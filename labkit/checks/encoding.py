"""``content_encoding``: a whole answer reaches the client in an encoding it accepts and its
headers declare, whatever the client accepts.

Providers gzip a whole answer for a client that accepts gzip, and so does the mock. httpx asks
for gzip by itself and hands the proxy the decoded body, so a proxy that reads the answer with
``aread()`` and sends those bytes is right for every client. Two mistakes are not: passing the
client's ``Accept-Encoding`` on and relaying the upstream's raw (compressed) bytes without their
``Content-Encoding``, or copying the upstream's ``Content-Encoding`` onto bytes httpx already
decoded. Either way the client's JSON parser gets bytes its headers do not describe.

Experiment: two short whole answers through the proxy, one from a client that accepts gzip and
one from a client that accepts only ``identity``. Each body is decoded as the response's own
``Content-Encoding`` says, as any HTTP client does. Pass: both are chat completions (JSON with
``choices``), and the identity client's answer is not compressed. Nothing is timed.

``observe`` sends both; ``judge`` decides (tested in process:
tests/checks/test_judges_encoding.py). Each answer is given up after LIMIT_S, stretched with the
run's ``Budget``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, chat_body
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "content_encoding"
STEP = "06_midstream_errors"
SUMMARY = "a whole answer reaches the client readable, whatever encoding it accepts"
MOCK_ONLY = "needs an upstream that gzips whole answers, which the grading engine does not"
GZIP_SEED, IDENTITY_SEED = 6201, 6202
SCENARIO = {"ttft_ms": 50, "tps": 200, "tokens": 30}
ACCEPTS = {"gzip": "gzip", "identity": "identity"}
LIMIT_S = 5.0
BUDGET_S = 6.0
GZIP_MAGIC = b"\x1f\x8b"

result = Outcome(ID, STEP)


@dataclass(frozen=True)
class Answer:
    """One whole answer as the client got it: its status, the ``Content-Encoding`` its headers
    declared, whether its body (decoded as they declare) was a chat completion, and whether
    that body still started with gzip's magic bytes."""

    status: int | None
    declared: str
    readable: bool
    gzip_inside: bool
    error: str = ""


def read_answer(capture: Capture) -> Answer:
    """What a client makes of a whole answer, decoding it as its headers declare."""
    declared = capture.headers.get("content-encoding", "").strip().lower()
    body = capture.body
    try:
        answer = json.loads(body)
        readable = isinstance(answer, dict) and "choices" in answer
    except ValueError:
        readable = False
    error = capture.transport_error or ""
    return Answer(capture.status, declared, readable, body.startswith(GZIP_MAGIC), error)


@dataclass(frozen=True)
class Observed:
    gzip: Answer
    identity: Answer


async def observe(ctx: CheckContext) -> Observed:
    limit = ctx.budget.stretch(LIMIT_S)

    async def ask(seed: int, accept: str) -> Answer:
        capture = await acapture_stream(
            ctx.chat_url,
            json=chat_body(seed, SCENARIO, stream=False),
            headers={"accept-encoding": accept},
            timeout=limit,
        )
        return read_answer(capture)

    gzip, identity = await asyncio.gather(
        ask(GZIP_SEED, ACCEPTS["gzip"]), ask(IDENTITY_SEED, ACCEPTS["identity"])
    )
    return Observed(gzip, identity)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: both answers are readable chat completions once decoded as declared, and the
    identity client's is not compressed."""
    evidence: dict[str, int | str | bool | None] = {}
    for name, answer in (("gzip", observed.gzip), ("identity", observed.identity)):
        evidence[f"{name}_client_status"] = answer.status
        evidence[f"{name}_client_declared_encoding"] = answer.declared or None
        evidence[f"{name}_client_body_readable"] = answer.readable
        evidence[f"{name}_client_got_gzip_bytes"] = answer.gzip_inside
    answers = (observed.gzip, observed.identity)
    if any(a.status != 200 for a in answers):
        return result.failed(
            "a whole answer came back with an error status",
            evidence,
            "forward non-streamed requests too: read the upstream's whole answer and send it on "
            "with its status.",
        )
    identity_ok = observed.identity.declared in ("", "identity")
    if all(a.readable for a in answers) and identity_ok:
        return result.passed(
            "whole answers reach the client readable, whatever encoding it accepts", evidence
        )
    if any(a.gzip_inside for a in answers):
        verdict = "a whole answer reached the client as gzip its headers do not declare"
        advice = (
            "do not pass the client's Accept-Encoding upstream and relay raw bytes: read the "
            "answer with aread(), which undoes the upstream's encoding, and send that."
        )
    elif not identity_ok:
        verdict = "a client that accepts only identity got a compressed answer"
        advice = "send the decoded answer, with no Content-Encoding of the upstream's."
    else:
        verdict = "a whole answer reached the client in a form it cannot read"
        advice = (
            "send the bytes aread() returns (already decoded) without copying the upstream's "
            "Content-Encoding or Content-Length."
        )
    return result.failed(verdict, evidence, advice)
