"""One answer's stream: upstream attempts through the release policy, restarts by the restart
policy, and every event the reader is sent, numbered.

An answer (:class:`Answer`) is what the reader has been sent so far, across attempts. An
attempt is one upstream request: its text goes through a fresh validation buffer, its tool
calls are held (``_tool_calls``), and it ends ``gateway.completed`` or raises a
``GatewayFailure``; the :class:`Relay` asks the restart policy what a failure means and sends
``gateway.restarting`` or ``gateway.interrupted``. Each upstream request is one billing line
(``log_usage``), whether it completed, failed or the client left (``cancelled``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labkit.errors import GatewayFailure as Failure  # one attempt ended without a usable answer
from labkit.stream_gateway._parts import ProxyParts
from labkit.stream_gateway._policies import ReleasePolicy, RestartPolicy
from labkit.stream_gateway._tool_calls import checked_calls, hold_calls, offered_schemas
from labkit.stream_gateway._upstream import CHAT_PATH, upstream_chunks
from labkit.wire import says_something

if TYPE_CHECKING:
    import httpx

    from labkit.stream_gateway._metrics import GatewayMetrics


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


@dataclass
class Attempt:
    """One upstream request's own state: its bill, its validation buffer, its finish reason."""

    usage: Any
    buffer: ReleasePolicy
    finish: str | None = None


@dataclass(frozen=True)
class Relay:
    """What every answer of one gateway shares: the proxy's parts, the two policies, the
    metrics. ``release`` makes one validation buffer per upstream attempt."""

    parts: ProxyParts
    release: Callable[[], ReleasePolicy]
    restart: RestartPolicy
    metrics: GatewayMetrics

    @property
    def release_name(self) -> str:
        """What ``gateway.start`` reports: the class's ``name`` (or its ``__name__``)."""
        return str(getattr(self.release, "name", getattr(self.release, "__name__", "custom")))

    async def stream(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        headers: dict[str, str],
        answer: Answer,
    ) -> AsyncIterator[bytes]:
        """The whole answer: ``gateway.start``, then attempts until one completes or the
        restart policy says no; counted in ``gateway_streams`` by how it ended."""
        outcome = "cancelled"
        try:
            yield answer.event(
                "gateway.start",
                request_id=answer.request_id,
                release=self.release_name,
                restart=self.restart.describe(),
            )
            number = 1
            while True:
                try:
                    # aclosing: if the client leaves while a piece is being sent, the attempt
                    # is closed at once (its upstream with it), not whenever it is collected.
                    async with aclosing(self.attempt(client, body, headers, answer)) as pieces:
                        async for piece in pieces:
                            yield piece
                    outcome = "completed"
                    return
                except Failure as failure:
                    again, why = self.restart.decide(failure.reason, answer.released_chars, number)
                    if not again:
                        outcome = "interrupted"
                        yield _interrupted(answer, failure, number, why)
                        return
                    number += 1
                    answer.calls.clear()
                    yield answer.event("gateway.restarting", attempt=number, reason=failure.reason)
        finally:
            self.metrics.streams.labels(outcome).inc()

    async def attempt(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        headers: dict[str, str],
        answer: Answer,
    ) -> AsyncGenerator[bytes, None]:
        """One upstream request, through the release policy. Raises ``Failure``."""
        upstream_body, _ = self.parts.ask_for_usage({**body, "stream": True})
        request = client.build_request("POST", CHAT_PATH, json=upstream_body, headers=headers)
        state = Attempt(usage=self.parts.Usage(), buffer=self.release())
        outcome = "cancelled"  # stays so if the client leaves
        try:
            async with aclosing(upstream_chunks(self.parts, client, request)) as chunks:
                async for chunk in chunks:
                    for piece in self._take(chunk, state, answer):
                        yield piece
            # The upstream's terminal event came: now, and only now, validate the rest.
            for piece in self._validated_rest(body, state, answer):
                yield piece
            outcome = "completed"
            yield _completed(state, answer)
        except Failure:
            outcome = "error"
            raise
        finally:
            self.parts.log_usage(state.usage, outcome)  # one billing line per upstream request

    def _take(self, chunk: dict[str, Any], state: Attempt, answer: Answer) -> Iterator[bytes]:
        """One upstream chunk: its bill, its tool calls held, its text through the buffer."""
        if state.usage.id is None:
            state.usage.id = chunk.get("id")
        if chunk.get("usage"):
            state.usage.take(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            state.finish = choice.get("finish_reason") or state.finish
            hold_calls(answer.calls, delta.get("tool_calls") or [])
            text = delta.get("content") or ""
            if text and not answer.first_content:
                answer.first_content = True
                self.metrics.ttft.observe(time.monotonic() - answer.started)
            for fragment in state.buffer.feed(text) if text else []:
                yield self._released(answer, fragment)
            if state.buffer.rejected:
                raise Failure("rejected", "a sentence failed validation")

    def _validated_rest(
        self, body: dict[str, Any], state: Attempt, answer: Answer
    ) -> Iterator[bytes]:
        """After the upstream's terminal event: a refusal, what the buffer still releases, and
        the tool calls, once every one is valid."""
        if state.finish == "content_filter":
            raise Failure("refusal", "the model refused; held text was not shown")
        for fragment in state.buffer.finish():
            yield self._released(answer, fragment)
        if state.buffer.rejected:
            raise Failure("rejected", "a sentence failed validation")
        for index, call in checked_calls(answer.calls, state.finish, offered_schemas(body)):
            yield answer.event("gateway.tool_call", index=index, **call)

    def _released(self, answer: Answer, fragment: str) -> bytes:
        answer.released_chars += len(fragment)
        if not answer.first_useful and says_something(fragment):
            answer.first_useful = True
            self.metrics.first_useful.observe(time.monotonic() - answer.started)
        return answer.event("gateway.delta", text=fragment)


def _completed(state: Attempt, answer: Answer) -> bytes:
    """The one success ending: the finish reason, the bill, what was shown."""
    usage = state.usage
    return answer.event(
        "gateway.completed",
        finish_reason=state.finish,
        usage={
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
        upstream_id=usage.id,
        released_chars=answer.released_chars,
    )


def _interrupted(answer: Answer, failure: Failure, attempts: int, why: str) -> bytes:
    """Every other ending: why, what the reader has already seen, and why not again."""
    return answer.event(
        "gateway.interrupted",
        reason=failure.reason,
        message=failure.message,
        released_chars=answer.released_chars,
        attempts=attempts,
        restartable=False,
        why=why,
    )
