"""The fault × client matrix: run every cell through the reference proxy, say what went wrong.

One *lane* per client behaviour: a mock upstream (thread) and a reference proxy (child process,
so a crash is a dead process, not a dead test run) of its own, with its own usage log. Inside a
lane the cells run one after the other, so the usage lines a cell appends are exactly its own;
the lanes run side by side. ``run_matrix()`` returns a :class:`CellResult` per cell with the list
of failed assertions (empty: the cell passed) and the measured evidence; the tests and
``print_matrix.py`` both read it.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import openai

from labkit import MockUpstream, capture_stream, serve, serve_subprocess
from labkit.capture import Capture
from labkit.servers import ServerHandle
from mock_upstream import create_app

CHAT = "/v1/chat/completions"
REFERENCE_TARGET = "solutions.proxy:app"
# Both references: the one the notebooks teach (httpx) and the one to deploy (aiohttp).
REFERENCE_TARGETS = {"httpx": REFERENCE_TARGET, "aiohttp": "solutions.aiohttp_proxy:app"}

# The reference's knobs, shortened so the matrix stays quick: heartbeat every 0.3 s, give up on
# an upstream silent for 2 s (the defaults are 2 s and 60 s).
HEARTBEAT_S = 0.3
UPSTREAM_IDLE_S = 2.0
PROXY_ENV = {"HEARTBEAT_S": str(HEARTBEAT_S), "UPSTREAM_IDLE_S": str(UPSTREAM_IDLE_S)}

# Pacing. Reading clients: 12 tokens at 40/s. Clients that leave: 2 tokens/s, so one token
# interval (0.5 s) is a wide margin for "generation stops within a token interval".
READ_PACE: dict[str, Any] = {"ttft_ms": 50, "tps": 40, "tokens": 12}
LEAVE_TPS = 2.0
TOKEN_INTERVAL_S = 1.0 / LEAVE_TPS
LEAVE_PACE: dict[str, Any] = {"ttft_ms": 50, "tps": LEAVE_TPS, "tokens": 12}
BEFORE_FIRST_PACE: dict[str, Any] = {"ttft_ms": 1500, "tps": LEAVE_TPS, "tokens": 12}
# Before a first token due at 1.5 s (which cannot come sooner), and late enough that a loaded
# machine has answered with its headers: the hang-up must come after the 200.
LEAVE_BEFORE_FIRST_S = 1.0
SLOW_READ_INTERVAL_S = 0.05
# The mock's gauge must be back to 0 this long after the client is done.
IDLE_WITHIN_S = 1.0
SDK_TIMEOUT_S = 30.0

Outcome = Literal["completed", "cancelled", "error"]


@dataclass(frozen=True)
class Fault:
    """One mock scenario of the matrix."""

    name: str
    mock: dict[str, Any]
    ends: Literal["completed", "error", "status"]  # how a client that reads to the end sees it
    what: str

    @property
    def status(self) -> int | None:
        status = self.mock.get("status")
        return int(status) if status is not None else None


FAULTS: tuple[Fault, ...] = (
    Fault("healthy", {}, "completed", "a plain stream"),
    Fault("error_after", {"error_after": 6}, "error", "in-stream error after 6 tokens"),
    Fault("drop_after", {"drop_after": 6}, "error", "connection dropped after 6 tokens"),
    Fault(
        "stall",
        {"stall_after": 1, "stall_s": 1.0},
        "completed",
        "1 s of silence after 1 token (heartbeats cover it)",
    ),
    Fault(
        "stall_past_idle",
        {"stall_after": 1, "stall_s": 30.0},
        "error",
        f"30 s of silence after 1 token (past the proxy's {UPSTREAM_IDLE_S:g} s idle deadline)",
    ),
    *(
        Fault(
            f"status_{s}", {"status": s, "retry_after": 0}, "status", f"HTTP {s} before the stream"
        )
        for s in (429, 500, 503, 529)
    ),
    Fault("malformed", {"malformed_after": 3}, "completed", "one broken data frame after 3 tokens"),
    Fault("slow_first_token", {"ttft_ms": 1500}, "completed", "first token after 1.5 s"),
    Fault("refusal", {"refusal_after": 6}, "completed", "refusal (content_filter) after 6 tokens"),
)

Client = Literal[
    "reads_to_end",
    "leaves_before_first_token",
    "leaves_mid_stream",
    "slow_reader",
    "openai_sdk",
    "anthropic_sdk",
]
CLIENTS: tuple[Client, ...] = (
    "reads_to_end",
    "leaves_before_first_token",
    "leaves_mid_stream",
    "slow_reader",
    "openai_sdk",
    "anthropic_sdk",
)
LEAVING: frozenset[str] = frozenset({"leaves_before_first_token", "leaves_mid_stream"})
NOT_APPLICABLE = "n/a: the reference proxy serves /v1/chat/completions only (no /v1/messages)"
SDK_ATTEMPTS = 3  # openai's default max_retries=2: a 429/5xx before the stream is sent 3 times

CLIENT_NOTES: dict[str, str] = {
    "reads_to_end": "raw socket capture, reads every byte",
    "leaves_before_first_token": f"hangs up {LEAVE_BEFORE_FIRST_S} s in (first token due at 1.5 s)",
    "leaves_mid_stream": "hangs up right after the first token event",
    "slow_reader": f"sleeps {SLOW_READ_INTERVAL_S} s between socket reads, small receive buffer",
    "openai_sdk": "openai.OpenAI with its default retries, `with ... as stream`",
    "anthropic_sdk": NOT_APPLICABLE,
}

ASSERTS = (
    "proxy process alive and a fresh stream through it ends with [DONE]",
    f"mock_requests_running back to 0 within {IDLE_WITHIN_S:g} s",
    f"a client that left: the mock stopped generating within one token interval "
    f"({TOKEN_INTERVAL_S:g} s), record `cancelled`",
    "usage log: exactly one line per upstream request, the expected outcome, the upstream's id "
    "and its true counts whenever it sent usage",
    "the client sees the HTTP status (with Retry-After), an in-stream error event, a terminal "
    "[DONE] with only valid JSON events, or its own hang-up: never a silent truncation",
)


def expected_outcome(fault: Fault, client: str) -> Outcome:
    if fault.ends == "status":
        return "error"
    if client in LEAVING:
        return "cancelled"
    return "completed" if fault.ends == "completed" else "error"


@dataclass
class CellResult:
    fault: str
    client: str
    failures: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    applicable: bool = True
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.applicable and not self.failures


def chat_body(seed: int, mock: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "mock-gpt",
        "messages": [{"role": "user", "content": "tell me about streaming"}],
        "stream": True,
        "mock": {**mock, "seed": seed},
        **extra,
    }


def read_usage(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def running_gauge(mock: MockUpstream) -> float:
    return mock.metrics().get("mock_requests_running", -1.0)


@dataclass
class Lane:
    client: str
    mock_server: ServerHandle
    proxy: ServerHandle
    usage_log: Path

    @property
    def mock(self) -> MockUpstream:
        return MockUpstream(self.mock_server.url)


@contextmanager
def reference_proxy(
    upstream_url: str,
    usage_log: Path,
    env: dict[str, str] | None = None,
    name: str | None = None,
    target: str = REFERENCE_TARGET,
) -> Iterator[ServerHandle]:
    """The reference proxy in a child process (its own event loop, its own crash)."""
    full_env = {"UPSTREAM_URL": upstream_url, "USAGE_LOG": str(usage_log), **PROXY_ENV}
    full_env.update(env or {})
    with serve_subprocess(target, name=name, env=full_env) as proxy:
        yield proxy


_seeds = itertools.count(50_000)
# ---------------------------------------------------------------------------------------------
# One client behaviour against one fault


@dataclass
class Seen:
    """What the client saw, reduced to what the assertions need."""

    status: int | None = None
    terminal: str | None = None
    left_at: float | None = None  # wall clock when the client hung up
    failures: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)


def _pace(fault: Fault, client: str) -> dict[str, Any]:
    if client == "leaves_before_first_token":
        base = BEFORE_FIRST_PACE
    elif client == "leaves_mid_stream":
        base = LEAVE_PACE
    else:
        base = READ_PACE
    return {**base, **fault.mock}


def _judge_capture(cap: Capture, fault: Fault, client: str, seen: Seen) -> None:
    """The raw-socket clients: what they saw must be a proper ending."""
    seen.status, seen.terminal = cap.status, cap.terminal
    seen.evidence.update(
        status=cap.status,
        terminal=cap.terminal,
        token_events=cap.content_events,
        heartbeats=len(cap.comments),
        malformed_events=cap.malformed_events,
    )
    fail = seen.failures.append
    if cap.malformed_events:
        fail(f"client got {cap.malformed_events} event(s) that are not valid JSON")
    if fault.status is not None:
        if cap.status != fault.status:
            fail(f"expected HTTP {fault.status}, got {cap.status}")
        if cap.headers.get("retry-after") != "0":
            fail(f"expected Retry-After: 0 passed on, got {cap.headers.get('retry-after')!r}")
        if not (isinstance(cap.error, dict) and isinstance(cap.error.get("message"), str)):
            fail(f"expected an OpenAI-shaped error body, got {cap.body[:120]!r}")
        return
    if cap.status != 200:
        fail(f"expected HTTP 200, got {cap.status}")
    if client in LEAVING:
        if cap.terminal != "disconnected":
            fail(f"expected the client's own hang-up, stream ended {cap.terminal!r}")
        else:
            seen.left_at = cap.started_at + (cap.disconnected_at or 0.0)
        if client == "leaves_mid_stream" and cap.content_events < 1:
            fail("the client left before any token: not a mid-stream hang-up")
        if client == "leaves_before_first_token" and cap.content_events:
            fail("a token arrived before the client left")
        return
    if fault.ends == "completed":
        if cap.terminal != "done":
            fail(
                f"expected a stream ending in [DONE], got {cap.terminal!r} ({cap.transport_error})"
            )
        if not cap.text:
            fail("no text arrived")
        if fault.name in ("stall", "slow_first_token") and not cap.comments:
            fail("no heartbeat comment while the upstream was silent")
        if fault.name == "refusal" and '"content_filter"' not in cap.body.decode(errors="replace"):
            fail("the refusal's finish_reason content_filter did not reach the client")
    else:
        if cap.terminal != "error":
            fail(f"expected an in-stream error event, stream ended {cap.terminal!r}")
        elif not (isinstance(cap.error, dict) and cap.error.get("message")):
            fail(f"the error event has no message: {cap.error!r}")
        if b"[DONE]" in cap.body:
            fail("[DONE] was sent after an error: that reads as success")


def _run_capture(lane: Lane, fault: Fault, seed: int) -> Seen:
    url = lane.proxy.url + CHAT
    body = chat_body(seed, _pace(fault, lane.client))
    kwargs: dict[str, Any] = {"timeout": 30.0}
    if lane.client == "leaves_before_first_token":
        kwargs["disconnect_after_s"] = LEAVE_BEFORE_FIRST_S
    elif lane.client == "leaves_mid_stream":
        kwargs["disconnect_after_events"] = 1
    elif lane.client == "slow_reader":
        kwargs["read_interval_s"] = SLOW_READ_INTERVAL_S
    seen = Seen()
    cap = capture_stream(url, json=body, **kwargs)
    _judge_capture(cap, fault, lane.client, seen)
    return seen


def _run_openai(lane: Lane, fault: Fault, seed: int) -> Seen:
    seen = Seen()
    fail = seen.failures.append
    body = chat_body(seed, _pace(fault, lane.client))
    raised: BaseException | None = None
    chunks, finish = 0, None
    with openai.OpenAI(
        base_url=lane.proxy.url + "/v1", api_key="sk-matrix", timeout=SDK_TIMEOUT_S
    ) as client:
        try:
            with client.chat.completions.create(
                model=body["model"],
                messages=body["messages"],
                stream=True,
                extra_body={"mock": body["mock"]},
            ) as stream:
                for chunk in stream:
                    chunks += 1
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
        except Exception as exc:
            raised = exc
    seen.evidence.update(
        chunks=chunks, finish_reason=finish, raised=type(raised).__name__ if raised else None
    )
    if fault.status is not None:
        if not isinstance(raised, openai.APIStatusError) or raised.status_code != fault.status:
            fail(f"expected openai.APIStatusError {fault.status}, got {raised!r}")
    elif fault.ends == "error":
        if not isinstance(raised, openai.APIError) or isinstance(raised, openai.APIStatusError):
            fail(f"expected the in-stream openai.APIError, got {raised!r}")
    else:
        if raised is not None:
            fail(f"expected a clean stream, the SDK raised {type(raised).__name__}: {raised}")
        want = "content_filter" if fault.name == "refusal" else "stop"
        if raised is None and finish != want:
            fail(f"expected finish_reason {want!r}, got {finish!r}")
    return seen


# ---------------------------------------------------------------------------------------------
# The assertions every cell shares: proxy, mock, usage log


def run_cell(lane: Lane, fault: Fault) -> CellResult:
    result = CellResult(fault.name, lane.client)
    started = time.monotonic()
    seed = next(_seeds)
    mock = lane.mock
    before = len(read_usage(lane.usage_log))
    try:
        seen = (_run_openai if lane.client == "openai_sdk" else _run_capture)(lane, fault, seed)
    except Exception as exc:  # the client itself blew up: that is a failed cell, not a crash
        result.failures.append(f"the client failed: {type(exc).__name__}: {exc}")
        seen = Seen()
    done_at = time.time()
    result.failures += seen.failures
    result.evidence.update(seen.evidence)
    fail = result.failures.append

    # the mock: back to idle within a second, the cell's records in the right state
    idle = wait_for(lambda: running_gauge(mock) == 0, IDLE_WITHIN_S)
    idle_after = time.time() - done_at
    result.evidence["mock_idle_after_s"] = round(idle_after, 3)
    if not idle:
        fail(f"mock_requests_running still {running_gauge(mock):g} {IDLE_WITHIN_S:g} s later")
    records = [r for r in mock.requests() if r["scenario"].get("seed") == seed]
    attempts = SDK_ATTEMPTS if lane.client == "openai_sdk" and fault.status else 1
    if len(records) != attempts:
        fail(f"expected {attempts} upstream request(s), the mock saw {len(records)}")
    outcome = expected_outcome(fault, lane.client)
    if outcome == "cancelled":
        for record in records:
            if record["state"] != "cancelled":
                fail(f"the mock record ended {record['state']!r}, expected 'cancelled'")
            if record["tokens_after_disconnect"]:
                fail(f"{record['tokens_after_disconnect']} tokens generated after the disconnect")
            stopped = record["disconnected_at"] or record["ended_at"]
            if seen.left_at is not None and stopped is not None:
                lag = stopped - seen.left_at
                result.evidence["stop_lag_s"] = round(lag, 3)
                if lag > TOKEN_INTERVAL_S:
                    fail(
                        f"generation stopped {lag:.3f} s after the client left, more than one "
                        f"token interval ({TOKEN_INTERVAL_S:g} s)"
                    )
    elif outcome == "completed":
        for record in records:
            if record["state"] != "completed":
                fail(f"the mock record ended {record['state']!r}, expected 'completed'")

    # the usage log: one line per upstream request, right outcome, true counts
    wait_for(lambda: len(read_usage(lane.usage_log)) >= before + len(records), 1.0)
    lines = read_usage(lane.usage_log)[before:]
    result.evidence["usage_lines"] = len(lines)
    if len(lines) != len(records):
        fail(f"expected {len(records)} usage line(s), got {len(lines)}: {lines}")
    ids = {r["id"]: r for r in records}
    for line in lines:
        if line.get("outcome") != outcome:
            fail(f"usage outcome {line.get('outcome')!r}, expected {outcome!r}")
        record = ids.get(line.get("id"))  # type: ignore[arg-type]
        if line.get("id") is not None and record is None:
            fail(f"usage id {line.get('id')!r} is none of the upstream's ids {sorted(ids)}")
        if record is not None and record["tokens_generated"] and line.get("id") is None:
            fail("the upstream sent its id, the usage line has none")
        sent_usage = record is not None and record["state"] == "completed"
        if sent_usage and record is not None:
            want = (
                record["prompt_tokens"],
                record["completion_tokens"],
                record["prompt_tokens"] + record["completion_tokens"],
            )
            got = (
                line.get("prompt_tokens"),
                line.get("completion_tokens"),
                line.get("total_tokens"),
            )
            if got != want:
                fail(f"usage counts {got}, the upstream's are {want}")
        elif line.get("completion_tokens") not in (None, record and record["completion_tokens"]):
            fail(f"usage counts {line} are not the upstream's")

    # the proxy: alive, and the next request is served normally
    probe = capture_stream(
        lane.proxy.url + CHAT,
        json=chat_body(next(_seeds), {"ttft_ms": 0, "tps": 1000, "tokens": 3}),
    )
    if not lane.proxy.running:
        fail("the proxy process died")
    if probe.terminal != "done":
        fail(f"the next request was not served normally: {probe!r}")
    wait_for(lambda: len(read_usage(lane.usage_log)) >= before + len(lines) + 1, 1.0)
    result.seconds = time.monotonic() - started
    return result


def _run_lane(lane: Lane, faults: tuple[Fault, ...]) -> list[CellResult]:
    return [run_cell(lane, fault) for fault in faults]


def _anthropic_route_absent(proxy_url: str) -> bool:
    response = httpx.post(proxy_url + "/v1/messages", json={}, timeout=10.0)
    return response.status_code in (404, 405)


def run_matrix(
    faults: tuple[Fault, ...] = FAULTS, target: str = REFERENCE_TARGET
) -> dict[tuple[str, str], CellResult]:
    """Every cell of the matrix through the proxy at ``target``; the lanes run side by side."""
    results: dict[tuple[str, str], CellResult] = {}
    active = [c for c in CLIENTS if c != "anthropic_sdk"]
    with tempfile.TemporaryDirectory(prefix="matrix-") as tmp, ExitStack() as stack:
        lanes = []

        def start(client: str) -> Lane:
            mock = stack.enter_context(serve(create_app(), name=f"matrix-mock-{client}"))
            log = Path(tmp) / f"usage-{client}.jsonl"
            proxy = stack.enter_context(
                reference_proxy(mock.url, log, name=f"matrix-proxy-{client}", target=target)
            )
            return Lane(client, mock, proxy, log)

        with ThreadPoolExecutor(len(active)) as pool:
            lanes = list(pool.map(start, active))
            for cells in pool.map(lambda lane: _run_lane(lane, faults), lanes):
                for cell in cells:
                    results[(cell.fault, cell.client)] = cell
        applicable = not _anthropic_route_absent(lanes[0].proxy.url)
        for fault in faults:
            cell = CellResult(fault.name, "anthropic_sdk", applicable=applicable)
            if applicable:
                cell.failures.append("the proxy serves /v1/messages: this cell needs a client")
            results[(fault.name, "anthropic_sdk")] = cell
    return results


def format_matrix(results: dict[tuple[str, str], CellResult]) -> str:
    """The matrix as a Markdown table (✅ passed, ❌ failed, n/a), then what each cell asserts."""
    faults = list(dict.fromkeys(f for f, _ in results))
    clients = list(dict.fromkeys(c for _, c in results))
    lines = [
        "| scenario ↓ / client → | " + " | ".join(f"`{c}`" for c in clients) + " |",
        "|---|" + "---|" * len(clients),
    ]
    for name in faults:
        cells = []
        for client in clients:
            cell = results[(name, client)]
            cells.append("n/a" if not cell.applicable else ("✅" if cell.passed else "❌"))
        what = next((f.what for f in FAULTS if f.name == name), "")
        lines.append(f"| `{name}` ({what}) | " + " | ".join(cells) + " |")
    applicable = [c for c in results.values() if c.applicable]
    passed = sum(c.passed for c in applicable)
    lines += [
        "",
        f"{passed}/{len(applicable)} applicable cells passed "
        f"({len(results) - len(applicable)} not applicable).",
        "",
        "Clients: " + "; ".join(f"`{c}`: {CLIENT_NOTES[c]}" for c in clients) + ".",
        "",
        "Every applicable cell asserts:",
        *(f"- {a}" for a in ASSERTS),
    ]
    failed = [c for c in applicable if not c.passed]
    if failed:
        lines += ["", "Failures:"]
        lines += [f"- `{c.fault}` × `{c.client}`: {'; '.join(c.failures)}" for c in failed]
    return "\n".join(lines)
