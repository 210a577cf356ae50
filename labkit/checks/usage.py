"""``usage``: the usage log holds the upstream's true counts, once per request, right outcome.

Experiment: four streams at once, each tagged so its mock record can be found:

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
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labkit.capture import Capture, acapture_stream
from labkit.checks.context import CheckContext, Outcome, Record, chat_body, finished
from labkit.checks.result import CheckResult

ID = "usage"
STEP = "05_usage_capture"
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
LOG_WAIT_S = 2.0
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")

result = Outcome(ID, STEP)


async def _send(ctx: CheckContext, name: str) -> Capture:
    seed, scenario, _ = REQUESTS[name]
    body = chat_body(seed, scenario, include_usage=name in ASKING)
    hang_up = HANG_UP_AFTER_S if name == "cancelled" else None
    return await acapture_stream(ctx.chat_url, json=body, disconnect_after_s=hang_up, timeout=10)


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


async def check_usage(ctx: CheckContext) -> CheckResult:
    if ctx.usage_log is None:
        return result.skipped(
            "skipped: no usage log to read",
            "grade the proxy file (not a URL) so the grader can set USAGE_LOG and read it.",
        )
    names = list(REQUESTS)
    captures = dict(zip(names, await asyncio.gather(*(_send(ctx, n) for n in names)), strict=True))
    records: dict[str, Record | None] = {}
    for name in names:
        records[name] = await ctx.record(REQUESTS[name][0], until=finished, wait_s=1.0)
    missing = [n for n in names if records[n] is None]
    if missing:
        return result.failed(
            "some requests never reached the upstream",
            {"missing": ",".join(missing)},
            "forward every request's JSON body to the upstream.",
            step="02_forwarding_proxy",
        )
    ids = {n: str(records[n]["id"]) for n in names}  # type: ignore[index]
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        lines, bad = read_log(ctx.usage_log)
        found = {n: [e for e in lines if e.get("id") == ids[n]] for n in names}
        if all(found.values()) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)

    evidence: dict[str, Any] = {"log_lines": len(lines), "bad_lines": bad}
    problems: list[str] = []
    for name in names:
        record, entries, expected = records[name], found[name], REQUESTS[name][2]
        assert record is not None
        evidence[f"{name}_lines"] = len(entries)
        if len(entries) != 1:
            problems.append("count")
            continue
        entry = entries[0]
        evidence[f"{name}_outcome"] = entry.get("outcome")
        if entry.get("outcome") != expected:
            problems.append("outcome")
        if expected == "completed":
            prompt, completion = record.get("prompt_tokens"), record.get("completion_tokens")
            truth = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": (prompt or 0) + (completion or 0),
            }
            for key in COUNTS:
                evidence[f"{name}_{key}"] = entry.get(key)
                evidence[f"{name}_{key}_upstream"] = truth[key]
            if any(entry.get(key) != truth[key] for key in COUNTS):
                problems.append("counts")

    for name in (*ASKING, *UNASKED):
        evidence[f"{name}_client_got_usage"] = captures[name].usage is not None
    if bad:
        problems.append("format")
    if any(captures[name].usage is None for name in ASKING):
        problems.append("asked")
    if any(captures[name].usage is not None for name in UNASKED):
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
