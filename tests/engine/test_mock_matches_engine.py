"""Calibration: the mock upstream answers the wire-level probes as the real engine does.

The lab teaches on the mock (faults on demand, exact pacing) and claims that what it teaches
holds on a real engine. This module checks that claim wherever a proxy could tell the two apart.
Each probe sends the same request to both servers over a real socket and returns an
:class:`Observation`: the facts it saw (a small dict of values, compared between the servers)
and the evidence behind them (numbers, shown when a comparison fails). Any difference in the
facts must be listed in ``KNOWN_DIFFERENCES`` with the value each server showed, and explained
in docs/known-limits.md under the heading the entry names. A listed difference that has gone
fails too, because the docs would then be wrong.

The probes, and why a right and a wrong answer land at least ten times apart:

- **stream**: 8 tokens with ``stream_options.include_usage``: the role chunk, the content
  deltas, ``finish_reason: length``, the usage chunk's shape and counts, ``data: [DONE]`` last.
- **hang-up**: 200 tokens asked, the client hangs up after 3 content chunks. A server that
  stops is idle within milliseconds, a token or two later; one that goes on needs seconds
  (~200 tokens) to finish: "idle within 2 s, at most 10 tokens after" separates them.
- **reader that reads nothing**: the client sets a tiny receive buffer and segment size, so the
  path to it holds only a few kilobytes (``holds_bytes``), sends the request and reads nothing
  until the server has generated what was asked. The request asks for ten times what that path
  holds (``slow_reader_tokens``): a server that paused for its reader would stop at a tenth.
  The engine's counter is ``tokens_decoded()``; the mock's record also says how many tokens it
  had handed to the socket (``tokens_sent``) by then.
- **invalid JSON** and **messages missing**: the status and the error body's shape.

The mock's pace is set per request by ``X-Mock-Scenario``, which the engine ignores; the body
carries ``ignore_eos`` (llama.cpp and vLLM: generate to ``max_tokens`` even past the end of the
answer), which the mock ignores, as it always generates to ``max_tokens`` when its scenario's
answer is longer. ``KNOWN_DIFFERENCES`` describes our engine, llama.cpp's ``llama-server``; with
``LABKIT_ENGINE_URL`` pointing at another engine the test says which facts differ there.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import h11
import httpx
import pytest

from labkit import EngineHandle, MockUpstream, ServerHandle, capture_stream

ROOT = Path(__file__).resolve().parents[2]
KNOWN_LIMITS = ROOT / "docs" / "known-limits.md"
SECTION = "Mock and engine: the differences the calibration test allows"
CHAT = "/v1/chat/completions"
PROMPT = "Tell me a long story about a lighthouse keeper and the sea."

#: The stream probe's length: short, so the engine answers in about a second.
STREAM_TOKENS: Final = 8
#: The hang-up probe: asked, read before hanging up, and what still counts as "stopped".
HANG_UP_ASKED: Final = 200
HANG_UP_AFTER_EVENTS: Final = 3
STOP_WITHIN_S: Final = 2.0
FEW_TOKENS: Final = 10
#: The slow reader's socket: a receive buffer and a segment size this small keep what the kernel
#: holds for it to about 13 KB (measured: 11.6 KB in the engine's send queue, 1 KB in ours).
#: A default socket on loopback lets the sender's buffer grow to 4 MB.
READER_RCVBUF: Final = 1024
READER_MSS: Final = 300
KERNEL_HOLDS_BYTES: Final = 16_000
#: uvicorn stops taking frames from an app while 64 KiB wait in its transport (flow control).
UVICORN_HOLDS_BYTES: Final = 65_536
#: How much more the slow reader's stream carries than the path to it can hold.
PREMISE: Final = 10
#: ``top_logprobs`` fattens each engine frame to about 2 KB (the mock ignores it), so the
#: engine's part of the probe needs fewer tokens.
TOP_LOGPROBS: Final = 20
#: The slow reader waits this long for the next generated token before calling it a stop.
STALL_S: Final = 5.0
READ_TIMEOUT_S: Final = 60.0


# ---------------------------------------------------------------------------------------------
# The two servers, read through their own counters


@dataclass(frozen=True)
class Server:
    """One side of the comparison, with the counters its own books keep."""

    name: str
    url: str
    model: str
    #: tokens generated so far (all requests), by the server's own count
    generated: Callable[[], int]
    #: requests it is generating for now
    running: Callable[[], int]
    #: tokens of the last request handed to the socket, where the server says (the mock)
    sent: Callable[[], int | None]
    #: what the path to a reader that reads nothing holds before the server's sending waits
    holds_bytes: int
    #: bytes per token of the slow reader's stream (measured, rounded down)
    bytes_per_token: int
    #: scenario keys the mock reads from every probe's request (the engine ignores them)
    scenario: tuple[tuple[str, object], ...] = ()

    @property
    def chat_url(self) -> str:
        return self.url + CHAT

    @property
    def slow_reader_tokens(self) -> int:
        """Tokens whose frames are ``PREMISE`` times what the path to a slow reader holds."""
        return math.ceil(PREMISE * self.holds_bytes / self.bytes_per_token)


def mock_server(handle: ServerHandle) -> Server:
    books = MockUpstream(handle)
    return Server(
        name="mock",
        url=handle.url,
        model="mock-gpt",
        generated=lambda: int(books.gauge("mock_tokens_generated_total")),
        running=books.running,
        sent=lambda: int(books.last()["tokens_sent"]),
        holds_bytes=KERNEL_HOLDS_BYTES + UVICORN_HOLDS_BYTES,
        bytes_per_token=150,  # measured 162: a chunk may carry more than one token
    )


def engine_server(handle: EngineHandle) -> Server:
    return Server(
        name="engine",
        url=handle.url,
        model=handle.model,
        generated=handle.tokens_decoded,
        running=handle.requests_running,
        sent=lambda: None,
        holds_bytes=KERNEL_HOLDS_BYTES,
        bytes_per_token=1_800,  # measured 2,086 with 20 top logprobs
    )


# ---------------------------------------------------------------------------------------------
# Observations, and the one judgement made on them


@dataclass
class Observation:
    """What one probe saw on one server: facts to compare, evidence to show."""

    facts: dict[str, object]
    evidence: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Known:
    """An accepted difference: what each server shows, and the heading that explains it."""

    mock: object
    engine: object
    heading: str


ROLE_CONTENT = "The role chunk's content: an empty string on the mock, null on llama.cpp"
USAGE_NULL = "`usage: null` on every chunk (mock), no `usage` key but the last chunk's (llama.cpp)"
INVALID_JSON = "Invalid JSON: a 400 from the mock, a 500 `server_error` from llama.cpp"
ERROR_CODE = "`error.code`: a string on the mock, the HTTP status as a number on llama.cpp"
ERROR_PARAM = "`error.param`: the mock names the field, llama.cpp leaves the key out"

#: (probe, fact) -> the accepted difference. Every heading is a section of docs/known-limits.md.
KNOWN_DIFFERENCES: Final[dict[tuple[str, str], Known]] = {
    ("stream", "role chunk's delta.content"): Known("an empty string", "null", ROLE_CONTENT),
    ("stream", "usage on the other chunks"): Known("null", "absent", USAGE_NULL),
    ("invalid JSON", "status"): Known(400, 500, INVALID_JSON),
    ("invalid JSON", "error.type"): Known("invalid_request_error", "server_error", INVALID_JSON),
    ("invalid JSON", "error.code"): Known("a string", "an integer", ERROR_CODE),
    ("invalid JSON", "error.param"): Known("null", "absent", ERROR_PARAM),
    ("messages missing", "error.code"): Known("a string", "an integer", ERROR_CODE),
    ("messages missing", "error.param"): Known("a string", "absent", ERROR_PARAM),
}


def differences(probe: str, mock: dict[str, object], engine: dict[str, object]) -> list[str]:
    """Every way the two servers' facts disagree with ``KNOWN_DIFFERENCES`` (empty: they agree)."""
    problems = []
    for fact in sorted(mock.keys() | engine.keys()):
        pair = (mock.get(fact, "(not observed)"), engine.get(fact, "(not observed)"))
        known = KNOWN_DIFFERENCES.get((probe, fact))
        if known is None:
            if pair[0] != pair[1]:
                problems.append(
                    f"{probe}: {fact}: the mock shows {pair[0]!r}, the engine {pair[1]!r}. Make "
                    "the mock match the engine, or list the difference in KNOWN_DIFFERENCES "
                    "and explain it in docs/known-limits.md"
                )
        elif pair[0] == pair[1]:
            problems.append(
                f"{probe}: {fact}: listed as a known difference ({known.heading!r}), but both "
                f"servers now show {pair[0]!r}. Remove the entry and its section"
            )
        elif pair != (known.mock, known.engine):
            problems.append(
                f"{probe}: {fact}: listed as mock {known.mock!r} / engine {known.engine!r}, "
                f"now mock {pair[0]!r} / engine {pair[1]!r}. Update the entry and its section"
            )
    return problems


# ---------------------------------------------------------------------------------------------
# Probes


def kind(value: object) -> str:
    """A value described by its JSON kind, for facts about fields whose values vary."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    return "an object"


def request_body(server: Server, max_tokens: int, **extra: object) -> dict[str, object]:
    return {
        "model": server.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


def mock_pace(server: Server, **scenario: object) -> dict[str, str]:
    """The mock's pace for this request (the engine ignores the header)."""
    keys = {"ttft_ms": 50, "tokens": 100_000, **scenario, **dict(server.scenario)}
    return {"X-Mock-Scenario": ";".join(f"{k}={v}" for k, v in keys.items())}


def usage_facts(usage: dict[str, Any]) -> dict[str, object]:
    """The usage object's fields and sums, as facts."""
    prompt, completion, total = (
        usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    )
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    whole = all(isinstance(n, int) for n in (prompt, completion, total, cached))
    return {
        "usage fields": "prompt, completion, total and prompt_tokens_details.cached_tokens"
        if whole
        else f"counts {[prompt, completion, total]}, cached_tokens {cached!r}",
        "completion_tokens": "max_tokens" if completion == STREAM_TOKENS else completion,
        "total_tokens": "prompt + completion"
        if isinstance(prompt, int) and isinstance(completion, int) and prompt + completion == total
        else total,
    }


def probe_stream(server: Server) -> Observation:
    """One short stream with usage: its chunks' shapes, from the role chunk to ``[DONE]``."""
    capture = capture_stream(
        server.chat_url,
        json=request_body(server, STREAM_TOKENS, stream_options={"include_usage": True}),
        headers=mock_pace(server, tps=200),
        timeout=READ_TIMEOUT_S,
    )
    datas = [event.data for event in capture.events]
    chunks: list[dict[str, Any]] = [json.loads(data) for data in datas if data != "[DONE]"]
    answer = [chunk for chunk in chunks if chunk.get("choices")]
    usage_chunks = [
        c for c in chunks if c.get("choices") == [] and isinstance(c.get("usage"), dict)
    ]
    usage: dict[str, Any] = usage_chunks[-1]["usage"] if usage_chunks else {}
    role = answer[0]["choices"][0]["delta"] if answer else {}
    finishing = [c["choices"][0] for c in answer if c["choices"][0].get("finish_reason")]
    deltas = [
        c["choices"][0]["delta"] for c in answer[1:] if not c["choices"][0].get("finish_reason")
    ]
    texts = [delta.get("content") for delta in deltas]
    others = {
        kind(c["usage"]) if "usage" in c else "absent" for c in chunks if c not in usage_chunks
    }
    facts: dict[str, object] = {
        "status": capture.status,
        "media type": capture.headers.get("content-type", "").split(";")[0],
        "role chunk's delta.role": role.get("role"),
        "role chunk's delta.content": kind(role.get("content")) if "content" in role else "absent",
        "content chunks": "one or more, each with text"
        if texts and all(isinstance(t, str) and t for t in texts)
        else f"{len(texts)}, of which {sum(not t for t in texts)} without text",
        "finish_reason": finishing[-1]["finish_reason"] if finishing else None,
        "finish chunk's delta": "empty"
        if finishing and finishing[-1]["delta"] == {}
        else "not empty",
        "usage chunk": f"{len(usage_chunks)} with choices: [] and usage",
        **usage_facts(usage),
        "usage on the other chunks": " and ".join(sorted(others)),
        "usage chunk comes": "last before [DONE]"
        if usage_chunks and chunks[-1] is usage_chunks[-1]
        else "elsewhere",
        "last event": datas[-1] if datas and datas[-1] == "[DONE]" else "not [DONE]",
    }
    return Observation(facts, {"text": capture.text, "content chunks": len(texts), "usage": usage})


def probe_hang_up(server: Server) -> Observation:
    """A client that hangs up mid-stream: does generation stop, and how soon?"""
    capture = capture_stream(
        server.chat_url,
        json=request_body(server, HANG_UP_ASKED),
        headers=mock_pace(server, tps=30),  # about the engine's pace: tokens in flight alike
        disconnect_after_events=HANG_UP_AFTER_EVENTS,
        timeout=READ_TIMEOUT_S,
    )
    at_hang_up = server.generated()
    left = time.monotonic()
    while server.running() > 0 and time.monotonic() - left < STOP_WITHIN_S:
        time.sleep(0.01)
    idle_after = time.monotonic() - left
    idle = server.running() == 0
    after = server.generated() - at_hang_up
    stopped = idle and after <= FEW_TOKENS
    facts: dict[str, object] = {
        "status": capture.status,
        "generation after the hang-up": f"stops (idle within {STOP_WITHIN_S:g} s, "
        f"at most {FEW_TOKENS} tokens)"
        if stopped
        else "goes on",
    }
    evidence: dict[str, object] = {
        "content events read": capture.content_events,
        "tokens generated after the hang-up": after,
        "idle after (s)": round(idle_after, 3) if idle else None,
    }
    return Observation(facts, evidence)


def raw_request(url: str, body: dict[str, object], headers: dict[str, str]) -> bytes:
    """The bytes of an HTTP/1.1 POST of ``body`` (h11 writes them; nothing is sent)."""
    parts = urlsplit(url)
    content = json.dumps(body).encode()
    client = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="POST",
        target=parts.path,
        headers=[
            ("Host", parts.netloc),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(content))),
            ("Connection", "close"),
            *headers.items(),
        ],
    )
    events = (request, h11.Data(data=content), h11.EndOfMessage())
    return b"".join(client.send(event) or b"" for event in events)


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """The status and the whole (de-chunked) body of the response on ``sock``."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    status, body = 0, b""
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            return status, body


def probe_reader_that_reads_nothing(server: Server) -> Observation:
    """A client that reads nothing while the server generates: does generation go on?"""
    asked = server.slow_reader_tokens
    body = request_body(server, asked, logprobs=True, top_logprobs=TOP_LOGPROBS)
    before = server.generated()
    address = urlsplit(server.url)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, READER_RCVBUF)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, READER_MSS)
        sock.settimeout(READ_TIMEOUT_S)
        sock.connect((address.hostname, address.port))
        sock.sendall(raw_request(server.chat_url, body, mock_pace(server, tps=5000)))
        started = progressed = time.monotonic()
        made = 0
        while made < asked and time.monotonic() - progressed < STALL_S:
            time.sleep(0.05)
            now_made = server.generated() - before
            if now_made > made:
                made, progressed = now_made, time.monotonic()
        took = progressed - started
        sent = server.sent()  # read before we read anything
        status, stream = read_response(sock)
    if len(stream) < PREMISE * server.holds_bytes:
        pytest.fail(
            f"the slow reader's premise failed on the {server.name}: its stream was "
            f"{len(stream):,} bytes, expected at least {PREMISE}x the {server.holds_bytes:,} "
            "that the path to the reader holds. Lower its bytes_per_token",
            pytrace=False,
        )
    facts: dict[str, object] = {
        "status": status,
        "while the client reads nothing": "generation goes on to the end"
        if made >= asked
        else f"generation stops at {made} of {asked} tokens",
        "the stream, read afterwards, ends with": "[DONE]"
        if stream.rstrip().endswith(b"data: [DONE]")
        else "no [DONE]",
    }
    evidence: dict[str, object] = {
        "tokens asked": asked,
        "generated while the client read nothing": made,
        "seconds to generate them": round(took, 2),
        "tokens handed to the socket meanwhile (the server's count)": sent,
        "stream bytes": len(stream),
        "what the path to the reader holds (bytes)": server.holds_bytes,
    }
    return Observation(facts, evidence)


def error_facts(response: httpx.Response) -> dict[str, object]:
    """The status and the error body's shape; the values that vary by kind only."""
    try:
        body = response.json()
    except ValueError:
        return {"status": response.status_code, "body": "not JSON"}
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return {"status": response.status_code, "body": f"not an error object: {body!r:.80}"}
    return {
        "status": response.status_code,
        "body": "{error: {...}}" if list(body) == ["error"] else f"keys {sorted(body)}",
        "error.message": kind(error.get("message")),
        "error.type": error.get("type"),
        "error.code": kind(error["code"]) if "code" in error else "absent",
        "error.param": kind(error["param"]) if "param" in error else "absent",
    }


def probe_invalid_json(server: Server) -> Observation:
    """A body that is not JSON: the status and the error's shape."""
    response = httpx.post(
        server.chat_url,
        content=b'{"model": "m", "messages": [',
        headers={"Content-Type": "application/json"},
        timeout=READ_TIMEOUT_S,
    )
    return Observation(error_facts(response), {"body": response.text[:300]})


def probe_messages_missing(server: Server) -> Observation:
    """A JSON body without ``messages``: the status and the error's shape."""
    body = {"model": server.model, "stream": True, "max_tokens": STREAM_TOKENS}
    response = httpx.post(server.chat_url, json=body, timeout=READ_TIMEOUT_S)
    return Observation(error_facts(response), {"body": response.text[:300]})


PROBES: Final[dict[str, Callable[[Server], Observation]]] = {
    "stream": probe_stream,
    "hang-up": probe_hang_up,
    "reader that reads nothing": probe_reader_that_reads_nothing,
    "invalid JSON": probe_invalid_json,
    "messages missing": probe_messages_missing,
}


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def servers(mock: ServerHandle, engine: EngineHandle) -> dict[str, Server]:
    return {"mock": mock_server(mock), "engine": engine_server(engine)}


@pytest.mark.parametrize("probe", list(PROBES))
@pytest.mark.sockets
def test_the_mock_answers_each_probe_as_the_engine_does(
    probe: str, servers: dict[str, Server]
) -> None:
    seen = {name: PROBES[probe](server) for name, server in servers.items()}
    problems = differences(probe, seen["mock"].facts, seen["engine"].facts)
    evidence = "\n".join(f"  {name}: {seen[name].evidence}" for name in seen)
    print(f"{probe}:\n{evidence}")  # pytest -rP shows it
    assert not problems, "\n".join(problems) + "\nevidence:\n" + evidence


def known_limits_headings() -> list[str]:
    """The ``###`` headings of known-limits.md's calibration section."""
    lines = KNOWN_LIMITS.read_text(encoding="utf-8").splitlines()
    assert f"## {SECTION}" in lines, f"docs/known-limits.md has no section '## {SECTION}'"
    headings = []
    for line in lines[lines.index(f"## {SECTION}") + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("### "):
            headings.append(line.removeprefix("### ").strip())
    return headings


def test_every_known_difference_is_explained_in_known_limits() -> None:
    headings = known_limits_headings()
    missing = sorted({k.heading for k in KNOWN_DIFFERENCES.values()} - set(headings))
    unused = sorted(set(headings) - {k.heading for k in KNOWN_DIFFERENCES.values()})
    assert not missing, f"KNOWN_DIFFERENCES names headings that {SECTION!r} lacks: {missing}"
    assert not unused, f"{SECTION!r} explains differences no longer listed: {unused}"


def test_a_difference_passes_only_when_listed_with_the_values_both_servers_show() -> None:
    listed = KNOWN_DIFFERENCES[("invalid JSON", "status")]
    assert differences("invalid JSON", {"status": 400}, {"status": 500}) == []
    assert differences("stream", {"finish_reason": "length"}, {"finish_reason": "length"}) == []
    (unlisted,) = differences("stream", {"finish_reason": "stop"}, {"finish_reason": "length"})
    assert "the mock shows 'stop', the engine 'length'" in unlisted
    (gone,) = differences("invalid JSON", {"status": 400}, {"status": 400})
    assert "both servers now show 400" in gone and listed.heading in gone
    (changed,) = differences("invalid JSON", {"status": 400}, {"status": 422})
    assert "now mock 400 / engine 422" in changed


@pytest.mark.sockets
def test_the_slow_reader_probe_tells_a_server_that_pauses_apart(mock: ServerHandle) -> None:
    """The probe's own mutant: a mock that pauses while its reader's socket is full stops at
    about a tenth of what was asked."""
    pausing_mock = dataclasses.replace(
        mock_server(mock), scenario=(("pause_on_backpressure", "true"),)
    )
    seen = probe_reader_that_reads_nothing(pausing_mock)
    print(f"pausing mock: {seen.evidence}")
    verdict = seen.facts["while the client reads nothing"]
    assert isinstance(verdict, str) and verdict.startswith("generation stops at"), seen
    generated = seen.evidence["generated while the client read nothing"]
    assert isinstance(generated, int) and generated * 5 <= pausing_mock.slow_reader_tokens, seen
