"""A stream gateway that runs a release policy inside the stream path (notebook 12).

The gateway is given; the release policy is the lesson: the notebook's (and
``solutions/release.py``'s) ``BySentence`` or ``WholeAnswer`` goes in as ``release``, a class
that makes one validation buffer per answer (:class:`ReleasePolicy`). The default,
:class:`Immediate`, holds nothing back.

It sits in front of a Chat Completions upstream and answers ``POST /v1/answers`` (an OpenAI
chat request) in the gateway's own stable protocol, named SSE events whose ``data`` repeats
the name as ``type`` and whose ``id`` is ``<request id>:<n>``:

``gateway.start``
    at once, before the upstream answers: ``request_id`` (also the ``X-Request-Id`` header),
    the release policy and the restart policy. The client's state goes connecting.
``gateway.delta``
    ``text``: a fragment the release policy let out. The upstream's text goes through the
    policy's validation buffer first; nothing else is sent as text.
``gateway.tool_call``
    ``index``, ``id``, ``name``, ``arguments``: a tool call, held whole (structured content is
    never streamed in pieces) and sent after the upstream's terminal event, once it is
    validated: the answer finished with ``finish_reason: tool_calls`` (any other reason may
    have cut the arguments short), the call names a tool the request offered, and its
    arguments parse as JSON and satisfy that tool's ``parameters`` schema (jsonschema). One
    call that fails ends the answer ``gateway.interrupted`` with ``invalid_tool_call``, and
    none of its calls is sent.
``gateway.restarting``
    ``attempt``, ``reason``: the upstream failed before anything was released, and the restart
    policy allows a fresh upstream request (a new generation, billed again).
``gateway.completed``
    the one success ending, sent only after the upstream's terminal event *and* validation:
    ``finish_reason``, ``usage``, ``upstream_id``, ``attempts``, ``released_chars``.
``gateway.interrupted``
    every other ending: ``reason`` (``upstream_error``, ``upstream_dropped``,
    ``upstream_status``, ``refusal``, ``rejected``, ``invalid_tool_call``), ``message``,
    ``released_chars`` (what the reader has already seen: label it interrupted, not an answer)
    and ``restartable`` with ``why``.

The gateway keeps no replay buffer: a request that carries ``Last-Event-ID`` is a 409 saying
so (the generation it names is gone; resuming it would need the gateway to keep generating
and storing after the client left).

It calls the proxy's own parts (``parts``: ``solutions.proxy`` or the learner's
``load_proxy()``): ``make_client``, ``ask_for_usage``, ``sse_events``, ``event_data``,
``upstream_headers`` and ``log_usage``, one billing line per upstream request (each attempt).
It exports ``gateway_ttft_seconds`` (first upstream content) beside
``gateway_first_useful_content_seconds`` (first released fragment that says something).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

import httpx
import jsonschema  # type: ignore[import-untyped]  # no stubs in the pinned stack
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from labkit.errors import GatewayFailure as Failure  # one attempt ended without a usable answer
from labkit.wire import says_something

__all__ = [
    "ANSWERS_PATH",
    "GatewayMetrics",
    "Immediate",
    "ReleasePolicy",
    "RestartPolicy",
    "make_stream_gateway",
]

ANSWERS_PATH: Final = "/v1/answers"
CHAT_PATH: Final = "/v1/chat/completions"
#: Reasons after which a fresh upstream request may give the reader a whole answer.
RESTARTABLE: Final = frozenset({"upstream_error", "upstream_dropped", "upstream_status"})
_BUCKETS: Final = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)


class ProxyParts(Protocol):
    """What the gateway calls of a proxy module (``solutions.proxy``, or the learner's
    ``proxy.py`` loaded with ``labkit.load_proxy``): the parts of it the lab has written."""

    SSE_HEADERS: Mapping[str, str]
    Usage: Callable[[], Any]

    def make_client(self, upstream_url: str) -> httpx.AsyncClient: ...
    def sse_events(self, lines: AsyncIterator[str]) -> AsyncIterator[str]: ...
    def event_data(self, event: str) -> str: ...
    def ask_for_usage(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]: ...
    def log_usage(self, usage: Any, outcome: str) -> None: ...
    def error_body(self, message: str, type_: str) -> dict[str, Any]: ...
    async def read_request(self, request: Request) -> dict[str, Any] | Response: ...
    def upstream_headers(self, request: Request) -> dict[str, str]: ...


class ReleasePolicy(Protocol):
    """One answer's validation buffer: what may be shown, fragment by fragment."""

    rejected: bool  #: a fragment failed validation: release nothing more
    withheld: str  #: text held back and never released (so far)

    def feed(self, text: str) -> list[str]:
        """Take the next fragment of the upstream's text; return what may be shown now."""
        ...

    def finish(self) -> list[str]:
        """The upstream's terminal event came: return what may still be shown."""
        ...


class Immediate:
    """The policy that holds nothing back: every fragment as it comes, nothing validated."""

    name: ClassVar[str] = "immediate"

    def __init__(self) -> None:
        self.rejected = False
        self.withheld = ""

    def feed(self, text: str) -> list[str]:
        return [text] if text else []

    def finish(self) -> list[str]:
        return []


@dataclass(frozen=True)
class RestartPolicy:
    """When the gateway may start the generation again after the upstream failed.

    Only while nothing has been released (the reader has seen nothing, so a new answer is
    not glued to a different old one), only for failures of the upstream's transport or
    service (a refusal or a rejected sentence is an answer, not a failure), and at most
    ``max_attempts`` upstream requests in all."""

    max_attempts: int = 2

    def decide(self, reason: str, released_chars: int, attempt: int) -> tuple[bool, str]:
        """(restart?, why) for one failed attempt."""
        if reason not in RESTARTABLE:
            return False, f"{reason} is an answer, not a failure: asking again is the user's call"
        if released_chars:
            return (
                False,
                f"{released_chars} characters were already shown: "
                "a new answer would not continue them",
            )
        if attempt >= self.max_attempts:
            return False, f"{attempt} of {self.max_attempts} attempts used"
        return True, "nothing was shown yet"

    def describe(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "only_before_release": True}


class GatewayMetrics:
    """The gateway's Prometheus metrics, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ttft = Histogram(
            "gateway_ttft_seconds",
            "Request arrival to the first upstream content chunk.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.first_useful = Histogram(
            "gateway_first_useful_content_seconds",
            "Request arrival to the first released fragment that says something.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.streams = Counter(
            "gateway_streams", "Streams by outcome.", ["outcome"], registry=self.registry
        )


def sse(event_id: str, kind: str, fields: dict[str, Any]) -> bytes:
    """One gateway event: ``id``, ``event`` and ``data`` (which repeats the name as ``type``)."""
    data = json.dumps({"type": kind, **fields})
    return f"id: {event_id}\nevent: {kind}\ndata: {data}\n\n".encode()


@dataclass
class Answer:
    """What the reader has been sent so far, across attempts."""

    request_id: str
    started: float
    sent: int = 0
    released_chars: int = 0
    first_content: bool = False
    first_useful: bool = False
    calls: dict[int, dict[str, str]] = field(default_factory=dict)

    def event(self, kind: str, **fields: Any) -> bytes:
        self.sent += 1
        return sse(f"{self.request_id}:{self.sent}", kind, fields)


async def upstream_chunks(
    parts: ProxyParts, client: httpx.AsyncClient, request: httpx.Request
) -> AsyncGenerator[dict[str, Any], None]:
    """The upstream's chunks, parsed, up to its ``[DONE]``. Every other ending raises
    ``Failure``: a status, an in-stream error, a drop. Broken frames are skipped."""
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as problem:
        message = f"cannot reach the upstream: {type(problem).__name__}"
        raise Failure("upstream_status", message) from None
    try:
        if upstream.status_code >= 400:
            await upstream.aread()
            raise Failure("upstream_status", f"the upstream answered {upstream.status_code}")
        try:
            async for event in parts.sse_events(upstream.aiter_lines()):
                data = parts.event_data(event)
                if data == "[DONE]":
                    return
                try:
                    chunk = json.loads(data)
                except ValueError:
                    continue  # a broken frame: nothing in it can be released
                if "error" in chunk:
                    error = chunk["error"] if isinstance(chunk["error"], dict) else {}
                    raise Failure("upstream_error", str(error.get("message", "upstream error")))
                yield chunk
        except httpx.HTTPError as problem:
            message = f"the upstream stream failed: {type(problem).__name__}"
            raise Failure("upstream_dropped", message) from None
        raise Failure("upstream_dropped", "the upstream closed the stream before it finished")
    finally:
        await upstream.aclose()


def hold_calls(calls: dict[int, dict[str, str]], deltas: list[dict[str, Any]]) -> None:
    """Add tool-call deltas to the calls held by index (never streamed in pieces)."""
    for delta in deltas:
        held = calls.setdefault(delta["index"], {"id": "", "name": "", "arguments": ""})
        function = delta.get("function") or {}
        held["id"] = delta.get("id") or held["id"]
        held["name"] = function.get("name") or held["name"]
        held["arguments"] += function.get("arguments") or ""


def offered_schemas(body: dict[str, Any]) -> dict[str, Any]:
    """The ``parameters`` schema of each function tool the request offers, by name."""
    schemas: dict[str, Any] = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schemas[function["name"]] = function.get("parameters") or {}
    return schemas


def checked_calls(
    calls: dict[int, dict[str, str]], finish: str | None, schemas: dict[str, Any]
) -> list[tuple[int, dict[str, str]]]:
    """The held calls in index order, once every one is validated (else ``Failure``).

    Valid means: the answer ended with ``finish`` ``tool_calls``, each call names a tool in
    ``schemas`` (:func:`offered_schemas`), and its arguments parse as JSON and satisfy that
    tool's schema. A call cut short by ``max_tokens`` can parse and still not be what the model
    meant, so the finish reason is checked before the arguments."""
    if not calls:
        return []
    if finish != "tool_calls":
        message = (
            f"the answer ended with finish_reason {finish!r}, not 'tool_calls': its tool calls "
            "may be unfinished"
        )
        raise Failure("invalid_tool_call", message)
    for index, call in sorted(calls.items()):
        name = call["name"]
        if name not in schemas:
            message = f"tool call {index} names {name!r}, a tool the request did not offer"
            raise Failure("invalid_tool_call", message)
        try:
            arguments = json.loads(call["arguments"])
        except ValueError:
            message = f"tool call {index} ({name}) has arguments that are not JSON"
            raise Failure("invalid_tool_call", message) from None
        try:
            jsonschema.validate(arguments, schemas[name])
        except jsonschema.ValidationError as problem:
            message = f"tool call {index} ({name}) does not fit its schema: {problem.message}"
            raise Failure("invalid_tool_call", message) from None
        except jsonschema.SchemaError as problem:
            message = f"tool {name!r} offers a schema that is not valid: {problem.message}"
            raise Failure("invalid_tool_call", message) from None
    return sorted(calls.items())


def make_stream_gateway(
    parts: ProxyParts,
    upstream_url: str,
    *,
    release: Callable[[], ReleasePolicy] = Immediate,
    restart: RestartPolicy = RestartPolicy(),
) -> FastAPI:
    """The gateway app over ``parts`` (a proxy module) and the upstream at ``upstream_url``.

    ``release`` makes one validation buffer per upstream attempt; its ``name`` attribute (or
    its ``__name__``) is what ``gateway.start`` reports."""
    release_name = str(getattr(release, "name", getattr(release, "__name__", "custom")))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with parts.make_client(upstream_url) as client:
            app.state.client = client
            yield

    app = FastAPI(lifespan=lifespan)
    metrics = GatewayMetrics()
    app.state.metrics = metrics

    @app.get("/metrics")
    async def export() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def attempt(
        client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str], answer: Answer
    ) -> AsyncGenerator[bytes, None]:
        """One upstream request, through the release policy. Raises ``Failure``."""
        upstream_body, _ = parts.ask_for_usage({**body, "stream": True})
        request = client.build_request("POST", CHAT_PATH, json=upstream_body, headers=headers)
        usage = parts.Usage()
        outcome = "cancelled"  # stays so if the client leaves
        buffer = release()
        finish: str | None = None
        try:
            async with aclosing(upstream_chunks(parts, client, request)) as chunks:
                async for chunk in chunks:
                    if usage.id is None:
                        usage.id = chunk.get("id")
                    if chunk.get("usage"):
                        usage.take(chunk["usage"])
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        finish = choice.get("finish_reason") or finish
                        hold_calls(answer.calls, delta.get("tool_calls") or [])
                        text = delta.get("content") or ""
                        if text and not answer.first_content:
                            answer.first_content = True
                            metrics.ttft.observe(time.monotonic() - answer.started)
                        for fragment in buffer.feed(text) if text else []:
                            yield released(answer, fragment)
                        if buffer.rejected:
                            raise Failure("rejected", "a sentence failed validation")
            # The upstream's terminal event came: now, and only now, validate the rest.
            if finish == "content_filter":
                raise Failure("refusal", "the model refused; held text was not shown")
            for fragment in buffer.finish():
                yield released(answer, fragment)
            if buffer.rejected:
                raise Failure("rejected", "a sentence failed validation")
            for index, call in checked_calls(answer.calls, finish, offered_schemas(body)):
                yield answer.event("gateway.tool_call", index=index, **call)
            outcome = "completed"
            yield answer.event(
                "gateway.completed",
                finish_reason=finish,
                usage={
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
                upstream_id=usage.id,
                released_chars=answer.released_chars,
            )
        except Failure:
            outcome = "error"
            raise
        finally:
            parts.log_usage(usage, outcome)  # one billing line per upstream request

    def released(answer: Answer, fragment: str) -> bytes:
        answer.released_chars += len(fragment)
        if not answer.first_useful and says_something(fragment):
            answer.first_useful = True
            metrics.first_useful.observe(time.monotonic() - answer.started)
        return answer.event("gateway.delta", text=fragment)

    async def answer_stream(
        client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str], answer: Answer
    ) -> AsyncIterator[bytes]:
        outcome = "cancelled"
        try:
            yield answer.event(
                "gateway.start",
                request_id=answer.request_id,
                release=release_name,
                restart=restart.describe(),
            )
            number = 1
            while True:
                try:
                    # aclosing: if the client leaves while a piece is being sent, the attempt
                    # is closed at once (its upstream with it), not whenever it is collected.
                    async with aclosing(attempt(client, body, headers, answer)) as pieces:
                        async for piece in pieces:
                            yield piece
                    outcome = "completed"
                    return
                except Failure as failure:
                    again, why = restart.decide(failure.reason, answer.released_chars, number)
                    if again:
                        number += 1
                        answer.calls.clear()
                        yield answer.event(
                            "gateway.restarting", attempt=number, reason=failure.reason
                        )
                        continue
                    outcome = "interrupted"
                    yield answer.event(
                        "gateway.interrupted",
                        reason=failure.reason,
                        message=failure.message,
                        released_chars=answer.released_chars,
                        attempts=number,
                        restartable=False,
                        why=why,
                    )
                    return
        finally:
            metrics.streams.labels(outcome).inc()

    @app.post(ANSWERS_PATH)
    async def answers(request: Request) -> Response:
        if "last-event-id" in request.headers:
            message = (
                "this gateway keeps no replay buffer: the generation behind "
                f"Last-Event-ID {request.headers['last-event-id']} is gone. Send a new request "
                "(its answer will be a different one, billed again)."
            )
            return JSONResponse(parts.error_body(message, "replay_not_supported"), 409)
        body = await parts.read_request(request)
        if isinstance(body, Response):
            return body
        answer = Answer(request_id=f"req_{uuid.uuid4().hex[:24]}", started=time.monotonic())
        stream = answer_stream(
            request.app.state.client, body, parts.upstream_headers(request), answer
        )
        headers = {**parts.SSE_HEADERS, "X-Request-Id": answer.request_id}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    return app
