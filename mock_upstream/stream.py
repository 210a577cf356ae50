"""Turn paced events into a streamed HTTP body (or one unary body), keeping the record.

A streamed answer has two halves, joined by a :class:`~mock_upstream.generation.Generation`
strategy. :func:`generate` is the engine's half: it plays the events at their due times
(:func:`mock_upstream.pacing.play` awaits inside it), encodes each into frames and books each
token as generated, and how the answer ended. :func:`sse_body` is the server's half: the body
generator Starlette's ``StreamingResponse`` drives, which hands each frame to uvicorn's
``send`` and books its tokens as sent once ``send`` took it. By default generation runs ahead
of a slow reader (a task of its own); with ``pause_on_backpressure`` it runs in step with the
body (see :mod:`mock_upstream.generation`).

Starlette's disconnect listener cancels the body generator when the client leaves: it catches
:class:`asyncio.CancelledError`, marks the record ``cancelled`` and stops generation at once.
:class:`RecordedStreamingResponse` is the backstop for a disconnect that lands anywhere else:
while the body waits in ``send`` for a full socket (the cancellation lands in Starlette, not in
the generator) or before the body ever ran; it does the same.

``drop_after`` ends generation with a drop marker (the record ``errored``), and the body raises
:class:`ConnectionDropped` once the frames before it were handed over: uvicorn then closes the
socket mid-body (the chunked body never gets its final chunk), which is what a client sees when
an upstream dies. ``end_after`` ends generation too, but the body simply returns: the response
is whole (its last chunk sent, the connection sound) and holds no terminal event, the record
``errored``. uvicorn logs any such exception as an error; :class:`QuietDropFilter` keeps
that intended drop out of the log, installed only while a mock app is served (its lifespan,
:func:`quiet_while_serving`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from mock_upstream.errors import Flavour
from mock_upstream.events import (
    Comment,
    Delta,
    Dropped,
    Ended,
    Event,
    Failed,
    Finished,
    Malformed,
    PartStarted,
    Usage,
)
from mock_upstream.generation import DROP, Frame, Frames, Generation
from mock_upstream.plan import FinishReason, Part
from mock_upstream.records import Recorder, RequestRecord

SSE_HEADERS: Final = {"Cache-Control": "no-cache"}
#: What ``comment_every_ms`` sends: a comment line, as OpenRouter's ``: OPENROUTER PROCESSING``.
COMMENT: Final = b": MOCK-UPSTREAM PROCESSING\n\n"
COMMENT_FRAME: Final = Frame(COMMENT)
UVICORN_ERROR_LOGGER: Final = "uvicorn.error"


class ConnectionDropped(Exception):
    """Raised inside a body generator to close the connection with no terminal event."""


class QuietDropFilter(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" record for :class:`ConnectionDropped`."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BaseExceptionGroup):
            _, rest = exc.split(ConnectionDropped)
            return rest is not None
        return not isinstance(exc, ConnectionDropped)


class _QuietWhileServing:
    """:class:`QuietDropFilter` on uvicorn's error logger while at least one mock is served.

    Building an app changes no logger: the app's lifespan enters :func:`quiet_intended_drops`
    at startup and leaves it at shutdown, and the filter goes when the last served mock stops.
    It is put first among the logger's filters, so a filter that collects records (labkit's
    per-server log router) never sees an intended drop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, int] = {}
        self._filters: dict[str, QuietDropFilter] = {}

    @contextmanager
    def __call__(self, logger_name: str = UVICORN_ERROR_LOGGER) -> Iterator[None]:
        logger = logging.getLogger(logger_name)
        with self._lock:
            if not self._users.get(logger_name):
                self._filters[logger_name] = QuietDropFilter()
                logger.filters.insert(0, self._filters[logger_name])
            self._users[logger_name] = self._users.get(logger_name, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._users[logger_name] -= 1
                if not self._users[logger_name]:
                    logger.removeFilter(self._filters.pop(logger_name))


quiet_intended_drops = _QuietWhileServing()
"""``with quiet_intended_drops():`` keeps intended drops out of uvicorn's error log meanwhile."""


@asynccontextmanager
async def quiet_while_serving(_app: object) -> AsyncIterator[None]:
    """The mock app's lifespan: intended drops stay out of the log while the app is served."""
    with quiet_intended_drops():
        yield


class Wire(Protocol):
    """One API's wire format."""

    flavour: Flavour

    def encode(self, event: Event) -> str:
        """The SSE frames for one event ("" for none)."""
        ...

    def body(self, outcome: Outcome) -> dict[str, Any]:
        """The unary response body for a finished answer."""
        ...


@dataclass
class Outcome:
    """A whole answer collected for a unary response."""

    parts: list[tuple[Part, str]] = field(default_factory=list)
    finish: FinishReason = "stop"
    usage: Usage = field(default_factory=lambda: Usage(0, 0))
    failed: bool = False


async def generate(
    events: AsyncGenerator[Event, None], wire: Wire, recorder: Recorder, record: RequestRecord
) -> Frames:
    """The answer's frames, each when it is due; books the tokens generated and the ending."""
    try:
        async with aclosing(events):
            async for event in events:
                if isinstance(event, Dropped):
                    recorder.finish(record, "errored", completion_tokens=record.tokens_generated)
                    yield DROP
                    return
                if isinstance(event, Ended):  # the body just ends: no terminal event, no break
                    recorder.finish(record, "errored", completion_tokens=record.tokens_generated)
                    return
                if isinstance(event, Comment):
                    yield COMMENT_FRAME
                    continue
                tokens = event.tokens if isinstance(event, Delta) else 0
                if tokens:
                    recorder.tokens(record, tokens)
                frames = wire.encode(event)
                if frames or tokens:
                    yield Frame(frames.encode(), tokens)
                if isinstance(event, Finished):
                    recorder.finish(
                        record,
                        "completed",
                        completion_tokens=event.usage.completion_tokens,
                        finish_reason=vllm_reason(event.reason),
                    )
                elif isinstance(event, Failed):
                    recorder.finish(
                        record, "errored", completion_tokens=event.usage.completion_tokens
                    )
    except Exception:
        recorder.finish(record, "errored", completion_tokens=record.tokens_generated)
        raise


async def sse_body(
    generation: Generation, recorder: Recorder, record: RequestRecord
) -> AsyncIterator[bytes]:
    """The streamed body: each frame as soon as ``send`` takes it, booked as sent after."""
    try:
        async with aclosing(generation.frames()) as frames:
            async for frame in frames:
                if frame.drop:
                    raise ConnectionDropped(f"mock scenario drop_after: closing {record.id}")
                yield frame.data
                if frame.tokens:
                    recorder.sent(record, frame.tokens)
    except (asyncio.CancelledError, GeneratorExit):
        recorder.disconnected(record)
        raise
    except ConnectionDropped:
        raise
    except Exception:
        recorder.finish(record, "errored", completion_tokens=record.tokens_generated)
        raise
    finally:
        generation.stop()


async def collect(
    events: AsyncGenerator[Event, None], recorder: Recorder, record: RequestRecord
) -> Outcome:
    """Play a whole answer for a unary response (waits as long as the stream would)."""
    outcome = Outcome()
    texts: dict[int, list[str]] = {}
    parts: dict[int, Part] = {}
    try:
        async for event in events:
            if isinstance(event, PartStarted):
                parts[event.index] = event.part
                texts[event.index] = []
            elif isinstance(event, Delta):
                recorder.tokens(record, event.tokens)
                texts[event.index].append(event.text)
            elif isinstance(event, Finished):
                outcome.finish, outcome.usage = event.reason, event.usage
            elif isinstance(event, Failed | Dropped | Ended):
                outcome.failed = True
            elif isinstance(event, Malformed):
                continue
    except asyncio.CancelledError:
        recorder.disconnected(record)
        raise
    outcome.parts = [(parts[i], "".join(texts[i])) for i in sorted(parts)]
    if not outcome.failed and outcome.usage.completion_tokens == 0:
        outcome.usage = Usage(record.prompt_tokens, record.tokens_generated)
    return outcome


def vllm_reason(finish: FinishReason) -> str:
    """How vLLM's ``finished_reason`` label names the way an answer ended."""
    return "length" if finish == "length" else "stop"


class RecordedStreamingResponse(StreamingResponse):
    """A streaming response that, once it is done, leaves neither its record ``running`` nor
    its generation going."""

    def __init__(
        self,
        generation: Generation,
        *,
        recorder: Recorder,
        record: RequestRecord,
    ) -> None:
        body = sse_body(generation, recorder, record)
        super().__init__(body, media_type="text/event-stream", headers=SSE_HEADERS)
        self.generation = generation
        self.recorder = recorder
        self.record = record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # still running here: the answer never reached its end (the client left early)
            self.recorder.disconnected(self.record)
            self.generation.stop()
