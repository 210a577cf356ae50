"""``usage``: the usage log holds the upstream's true counts, once per request, right outcome.

Experiment: six streams at once (``REQUESTS``), each tagged so its mock record can be found:

- ``asked``: completes; the client asked for ``include_usage`` and must get the usage chunk;
- ``unasked``: completes; the client did not ask and must not get it (the proxy still needs the
  counts, so it asks the upstream itself and hides the chunk);
- ``cancelled``: the client hangs up after 0.6 s of a 6 s generation;
- ``errored``: the upstream sends an in-stream error after five tokens;
- ``on_choices_asked`` and ``on_choices_unasked``: complete from an upstream that puts the
  usage on its last chunk with choices (``usage_with_choices``, as some servers do) instead of
  a separate ``choices: []`` chunk. The proxy must take the counts from that chunk too (Envoy
  AI Gateway and LiteLLM dropped them), and strip the usage field from it for the client that
  did not ask, while passing on the rest of the chunk.

Then the usage log (``$USAGE_LOG``, one JSON object per line) must hold exactly one line for each
upstream completion id, with outcome ``completed`` (four times), ``cancelled`` and ``error``.
A client that asked for usage gets it; one that did not gets no usage in any chunk.
For the completed ones ``prompt_tokens``, ``completion_tokens`` and ``total_tokens`` must equal
the mock's own counts (a chunk may carry several tokens, so counting chunks is wrong). The
upstream never reports counts for a cancelled or failed stream: null or an estimate is accepted.

Skipped when there is no usage log to read (black-box grading of a URL).

On a real engine (``observe_on_engine``) the requests go one at a time, so that the
engine's books (prompt tokens, cached ones included, and tokens predicted) before and after each
are its true counts: ``asked`` and ``unasked`` complete (24 tokens each), ``cancelled`` hangs up
once the engine has decoded a few of 200 tokens. The log must hold one line for each, by the
completion id the client saw, with the right outcome and, for the completed ones, the engine's
counts. ``errored`` and ``on_choices_*`` need an upstream that fails or puts its usage on a
chunk with choices on demand, which only the mock does: the engine always sends a separate
``choices: []`` chunk.

``observe`` (``observe_on_engine``) runs the requests and reads the log; ``judge`` holds every
rule, and is tested on constructed observations in process (tests/checks/test_judges_usage.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished
from labkit.checks.engine_requests import OpenStream, engine_body
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "usage"
STEP = "05_usage_capture"
SUMMARY = "the usage log has the true counts, once, right outcome"
BUDGET_S = 10.0
ENGINE_BUDGET_S = 90.0
FAST = {"ttft_ms": 100, "tps": 50, "tokens": 30}
REQUESTS: Mapping[str, tuple[int, Mapping[str, int], str]] = {
    # name: (seed, scenario, expected outcome)
    "asked": (4401, FAST, "completed"),
    "unasked": (4402, FAST, "completed"),
    "cancelled": (4403, {"ttft_ms": 100, "tps": 20, "tokens": 120}, "cancelled"),
    "errored": (4404, {**FAST, "error_after": 5}, "error"),
    "on_choices_asked": (4405, {**FAST, "usage_with_choices": 1}, "completed"),
    "on_choices_unasked": (4406, {**FAST, "usage_with_choices": 1}, "completed"),
}
ASKING = ("asked", "on_choices_asked")
UNASKED = ("unasked", "on_choices_unasked")
HANG_UP_AFTER_S = 0.6
LIMIT_S = 10.0  # each request's read timeout
# How long a line that has not come yet is waited for, once the streams are over: a correct
# proxy writes it within milliseconds, but a loaded machine can hold it up for seconds
# (docs/measurements.md). Only a proxy whose line never comes waits it out.
LOG_WAIT_S = 5.0
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")

ENGINE_TOKENS = 24
ENGINE_CANCEL_TOKENS = 200
ENGINE_HANG_UP_DECODES = 5
ENGINE_LIMIT_S = 30.0  # per read, and for the engine to start decoding
ENGINE_IDLE_WAIT_S = 30.0
IDLE_EVERY_S = 0.1  # nobody hangs up while these wait: the engine's books may be read often

result = Outcome(ID, STEP)


async def _send(ctx: CheckContext, name: str) -> Capture:
    seed, scenario, _ = REQUESTS[name]
    body = chat_body(seed, scenario, include_usage=name in ASKING)
    hang_up = HANG_UP_AFTER_S if name == "cancelled" else None
    return await acapture_stream(
        ctx.chat_url, json=body, disconnect_after_s=hang_up, timeout=ctx.budget.stretch(LIMIT_S)
    )


def read_log(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The log's JSON object lines, and how many lines were not JSON objects."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], 0
    lines, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(entry, dict):
            lines.append(entry)
        else:
            bad += 1
    return lines, bad


@dataclass(frozen=True)
class Sent:
    """One request of the experiment as the check saw it: the completion id the log line must
    carry, the outcome it must say, the upstream's true counts (for a completed request), and
    whether the client asked for usage and got it (None: not asked either way)."""

    name: str
    id: str | None
    outcome: str
    truth: Mapping[str, int | None] | None = None
    asked_usage: bool | None = None
    got_usage: bool = False


def _truth(prompt: int | None, completion: int | None) -> dict[str, int | None]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": (prompt or 0) + (completion or 0),
    }


@dataclass(frozen=True)
class Observed:
    """What the experiment saw: each request as sent (``Sent``), the usage log's new JSON object
    lines once every request had one (or LOG_WAIT_S had passed), and how many lines were not JSON
    objects (LOG_WAIT_S and the others stretched with the run's ``Budget``); or the requests
    that never reached the upstream (``missing``: the log is not read);
    or that there was no usage log to read (``has_log`` False)."""

    sent: tuple[Sent, ...] = ()
    log_lines: tuple[Mapping[str, Any], ...] = ()
    bad_lines: int = 0
    missing: tuple[str, ...] = ()
    has_log: bool = True


NO_LOG = Observed(has_log=False)


async def observe(ctx: CheckContext) -> Observed:
    if ctx.usage_log is None:
        return NO_LOG
    names = list(REQUESTS)
    captures = dict(zip(names, await asyncio.gather(*(_send(ctx, n) for n in names)), strict=True))
    records: dict[str, Record | None] = {}
    for name in names:
        records[name] = await ctx.record(REQUESTS[name][0], until=finished)
    missing = [n for n in names if records[n] is None]
    if missing:
        return Observed(missing=tuple(missing))
    sent = []
    for name in names:
        record = records[name]
        assert record is not None
        expected = REQUESTS[name][2]
        truth = None
        if expected == "completed":
            truth = _truth(record.get("prompt_tokens"), record.get("completion_tokens"))
        asked = True if name in ASKING else False if name in UNASKED else None
        got = captures[name].usage is not None
        sent.append(Sent(name, str(record["id"]), expected, truth, asked, got))
    return await _read_log(ctx.usage_log, sent, ctx.budget.stretch(LOG_WAIT_S))


async def observe_on_engine(ctx: CheckContext) -> Observed:
    if ctx.usage_log is None:
        return NO_LOG
    books, stretch = ctx.books, ctx.budget.stretch
    model = await books.model()
    lines_before = _line_count(ctx.usage_log)
    sent: list[Sent] = []
    missing: list[str] = []
    for name in ("asked", "unasked"):
        before = await books.read()
        body = engine_body(model, max_tokens=ENGINE_TOKENS, include_usage=name == "asked")
        capture = await acapture_stream(ctx.chat_url, json=body, timeout=stretch(ENGINE_LIMIT_S))
        idle = await books.wait_idle(stretch(ENGINE_IDLE_WAIT_S), IDLE_EVERY_S)
        after = idle or await books.read()
        spent = after.since(before)
        if spent.prompt == 0:
            missing.append(name)
        ids = _ids(capture)
        truth = _truth(spent.prompt, spent.predicted)
        got = capture.usage is not None
        sent.append(Sent(name, min(ids) if ids else None, "completed", truth, name == "asked", got))
    async with books.watch() as watch:
        before = watch.last
        body = engine_body(model, max_tokens=ENGINE_CANCEL_TOKENS)
        stream = await OpenStream(ctx.chat_url, body).start()
        started = await watch.until(
            lambda now: now.decoded - before.decoded >= ENGINE_HANG_UP_DECODES,
            stretch(ENGINE_LIMIT_S),
        )
        await stream.hang_up()
    if started is None:
        missing.append("cancelled")
    ids = stream.completion_ids
    sent.append(Sent("cancelled", min(ids) if ids else None, "cancelled"))
    await books.wait_idle(stretch(ENGINE_IDLE_WAIT_S))  # a proxy that does not cancel: going
    if missing:
        return Observed(missing=tuple(missing))
    log_wait = stretch(LOG_WAIT_S)
    return await _read_log(ctx.usage_log, sent, log_wait, since_line=lines_before)


def judge_on_engine(observed: Observed, budget: Budget) -> CheckResult:
    """The same judgement as on the mock: the engine's books give the true counts."""
    return judge(observed, budget)


def _ids(capture: Capture) -> set[str]:
    ids = set()
    for event in capture.events:
        try:
            chunk = event.json()
        except ValueError:
            continue
        if isinstance(chunk, dict) and isinstance(chunk.get("id"), str):
            ids.add(chunk["id"])
    return ids


def _line_count(path: Path) -> int:
    lines, bad = read_log(path)
    return len(lines) + bad


def _no_log() -> CheckResult:
    return result.skipped(
        "skipped: no usage log to read",
        "grade the proxy file (not a URL) so the grader can set USAGE_LOG and read it.",
    )


def _missing(names: Sequence[str]) -> CheckResult:
    return result.failed(
        "some requests never reached the upstream",
        {"missing": ",".join(names)},
        "forward every request's JSON body to the upstream.",
        step="02_forwarding_proxy",
    )


def _lines_for(
    entries: Sequence[Mapping[str, Any]], one: Sent, sent: Sequence[Sent]
) -> list[Mapping[str, Any]]:
    """The log lines for request ``one``: those with its id; for a request whose id the client
    never saw, the lines that carry none of the others' ids."""
    if one.id is not None:
        return [e for e in entries if e.get("id") == one.id]
    known = {s.id for s in sent if s.id is not None}
    return [e for e in entries if e.get("id") not in known]


async def _read_log(
    log: Path, sent: Sequence[Sent], wait_s: float, *, since_line: int = 0
) -> Observed:
    """Wait (up to ``wait_s``) for a line per request in ``log`` (from line ``since_line``
    on), and return what was sent with the lines there are then."""
    deadline = time.monotonic() + wait_s
    while True:
        lines, bad = read_log(log)
        lines = lines[since_line:] if since_line <= len(lines) else []
        if all(_lines_for(lines, one, sent) for one in sent) or time.monotonic() >= deadline:
            return Observed(tuple(sent), tuple(lines), bad)
        await asyncio.sleep(0.05)


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: exactly one line per request, with the outcome expected and (for a completed one)
    the upstream's counts; no line that is not a JSON object; usage sent to the clients that
    asked for it and only to them. The verdict names the first problem found. Nothing is
    timed: ``budget`` moves nothing."""
    if not observed.has_log:
        return _no_log()
    if observed.missing:
        return _missing(observed.missing)
    sent, lines = observed.sent, observed.log_lines
    found = {one.name: _lines_for(lines, one, sent) for one in sent}
    evidence: dict[str, Any] = {"log_lines": len(lines), "bad_lines": observed.bad_lines}
    problems: list[str] = []
    for one in sent:
        entries = found[one.name]
        evidence[f"{one.name}_lines"] = len(entries)
        if len(entries) != 1:
            problems.append("count")
            continue
        entry = entries[0]
        evidence[f"{one.name}_outcome"] = entry.get("outcome")
        if entry.get("outcome") != one.outcome:
            problems.append("outcome")
        if one.truth is not None:
            for key in COUNTS:
                evidence[f"{one.name}_{key}"] = entry.get(key)
                evidence[f"{one.name}_{key}_upstream"] = one.truth[key]
            if any(entry.get(key) != one.truth[key] for key in COUNTS):
                problems.append("counts")

    for one in sent:
        if one.asked_usage is not None:
            evidence[f"{one.name}_client_got_usage"] = one.got_usage
    if observed.bad_lines:
        problems.append("format")
    if any(one.asked_usage is True and not one.got_usage for one in sent):
        problems.append("asked")
    if any(one.asked_usage is False and one.got_usage for one in sent):
        problems.append("unasked")

    if not problems:
        return result.passed(
            "the usage log has the upstream's counts once per request with the right outcome",
            evidence,
        )
    verdict, advice = _explain(problems[0])
    return result.failed(verdict, evidence, advice)


def _explain(problem: str) -> tuple[str, str]:
    """The verdict and the advice for the first problem found."""
    return {
        "count": (
            "the usage log does not have exactly one line per request",
            "append one JSON line per request to $USAGE_LOG when its stream ends, however it "
            "ends (completed, cancelled or error): a finally block in the body generator.",
        ),
        "outcome": (
            "the usage log records the wrong outcome for some requests",
            "log outcome completed after data: [DONE], error after an error event or a failed "
            "upstream, cancelled when the client leaves.",
        ),
        "counts": (
            "the usage log's token counts differ from the upstream's",
            "take prompt_tokens, completion_tokens and total_tokens from the upstream's usage "
            "(ask for stream_options.include_usage), on whichever chunk it comes: a "
            "choices: [] chunk, or the last chunk with choices. A chunk may carry several "
            "tokens.",
        ),
        "format": (
            "the usage log has lines that are not JSON objects",
            "write one json.dumps(...) object per line, nothing else.",
        ),
        "asked": (
            "a client that asked for usage did not get the usage chunk",
            "forward the usage chunk to clients whose request had stream_options.include_usage.",
        ),
        "unasked": (
            "a client that did not ask for usage got the usage chunk",
            "ask the upstream for usage always, but for clients that did not ask drop the "
            "usage-only chunk, and take the usage field out of a chunk that still has choices.",
        ),
    }[problem]
