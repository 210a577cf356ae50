"""Background responses, as OpenAI's Responses API runs them: an answer that outlives its reader.

A Responses request with ``"background": true`` (and ``"stream": true``) is generated to its end
whether anyone reads it or not, and every event it generates is kept, in order. A reader that
comes back with ``GET /v1/responses/{id}?stream=true&starting_after=N`` gets exactly the events
it missed, those whose ``sequence_number`` is above N: the ones generated already at once, then
the live tail as it is generated, until the answer ends. It may leave and come back as often as
it likes; nothing is lost or repeated, because the cursor is the reader's, not the server's::

    generation (a task) --> kept: [0 1 2 3 ... n] --> POST /v1/responses (the first reader)
                                     |         +---> GET ...?stream=true&starting_after=2
                                     ends: completed | incomplete | failed,
                                           or cancelled (POST .../cancel)

A reader that leaves stops nothing: the record stays ``running`` until generation ends.
``POST /v1/responses/{id}/cancel`` stops generation at once (the record ``cancelled``, no token
generated after it); a reader on the live tail gets the events generated before the cancel and
then the end of the body, a whole HTTP response with no terminal event: OpenAI's stream has no
cancellation event, and the mock invents none. ``GET /v1/responses/{id}`` without ``stream``
answers the response object as it stands (``queued``, ``in_progress``, then ``completed``,
``incomplete``, ``failed`` or ``cancelled``).

The Responses wire numbers its events from 0, one ``sequence_number`` each, in the order they
are generated, so the n-th kept event is event n. What would add frames without a number
(``malformed_after``, ``comment_every_ms``) or tie generation to a reader
(``pause_on_backpressure``) is refused with background (:func:`check_scenario`).
``drop_after`` and ``end_after`` break (or cleanly end) the creating connection only, once it
has sent that many tokens: generation goes on, and a reader can resume (:class:`Cut`). A
request that waits for a slot (``slots``) is a background response only once admitted: one
whose client leaves before is dropped, as any queued request (no id was sent yet).

One app's background responses live in its :class:`BackgroundResponses`
(``MockState.background``): each is kept while it runs and ``keep_s`` seconds after it ends
(OpenAI keeps one "roughly 10 minutes"), and ``POST /debug/reset`` forgets those that ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

from starlette.responses import StreamingResponse

from mock_upstream.errors import ApiError
from mock_upstream.generation import Frame, Frames
from mock_upstream.records import Recorder, RequestRecord
from mock_upstream.scenario import Scenario, ScenarioError
from mock_upstream.stream import SSE_HEADERS, ConnectionDropped

#: How long an ended background response stays readable, by default (seconds).
DEFAULT_KEEP_S: Final = 600.0
#: The scenario keys a background response refuses, and why.
REFUSED: Final[dict[str, str]] = {
    "malformed_after": "its broken frame has no sequence_number for a reader to resume after",
    "comment_every_ms": "comments have no sequence_number for a reader to resume after",
    "pause_on_backpressure": "a background answer is generated whether anyone reads it or not",
}

_log = logging.getLogger(__name__)


class Kept(NamedTuple):
    """One event of a background answer, as sent: an SSE event (ending in a blank line) and
    the completion tokens it carries."""

    data: bytes
    tokens: int


@runtime_checkable
class Snapshots(Protocol):
    """What a wire says about its response object (:class:`ResponsesWire` has it)."""

    def snapshot(self) -> dict[str, Any]:
        """The response object as it stands."""
        ...

    def cancel(self) -> dict[str, Any]:
        """Mark the response cancelled; the cancelled response object."""
        ...


@dataclass(frozen=True)
class Cut:
    """Where the creating connection of a background answer stops: after ``at`` tokens sent,
    before the next event, it breaks (``drop``: ``drop_after``) or ends cleanly
    (``end_after``). Generation is not affected."""

    at: int
    drop: bool


def check_scenario(scenario: Scenario) -> None:
    """A key that a background response cannot honour is a 400 that says why."""
    refused = sorted(set(scenario.changed()) & REFUSED.keys())
    if refused:
        key = refused[0]
        raise ScenarioError(
            "scenario",
            key,
            f'{key} cannot be used with "background": true: {REFUSED[key]}. Leave {key} out, '
            "or send the request without background",
        )


def cut_for(scenario: Scenario) -> Cut | None:
    """The creating connection's cut, from ``drop_after`` and ``end_after`` (the drop first
    when both fall on the same token, as without background)."""
    pairs = ((scenario.drop_after, True), (scenario.end_after, False))
    cuts = [Cut(at, drop) for at, drop in pairs if at is not None]
    return min(cuts, key=lambda cut: (cut.at, not cut.drop), default=None)


def generation_scenario(scenario: Scenario) -> Scenario:
    """The scenario generation plays: without the faults that belong to the connection."""
    return dataclasses.replace(scenario, drop_after=None, end_after=None)


class BackgroundResponse:
    """One background answer: its generation task, the events kept so far, and the readers
    waiting for the next one."""

    def __init__(
        self,
        record: RequestRecord,
        wire: Snapshots,
        recorder: Recorder,
        on_end: Callable[[BackgroundResponse], None],
    ) -> None:
        self.record = record
        self.events: list[Kept] = []
        self._wire = wire
        self._recorder = recorder
        self._on_end = on_end
        self._grew = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.ended = False

    @property
    def id(self) -> str:
        return self.record.id

    def snapshot(self) -> dict[str, Any]:
        """The response object as it stands."""
        return self._wire.snapshot()

    def start(self, frames: Frames) -> None:
        """Generate ``frames`` in a task of its own, keeping each event."""
        self._task = asyncio.create_task(self._generate(frames), name=f"background {self.id}")
        self._task.add_done_callback(self._settle)

    async def _generate(self, frames: Frames) -> None:
        async with aclosing(frames):
            async for frame in frames:
                self._keep(frame)

    def _keep(self, frame: Frame) -> None:
        events = [event + b"\n\n" for event in frame.data.split(b"\n\n") if event]
        if not events:
            return
        # A frame that carries tokens is one delta event; the others carry none.
        self.events.extend(Kept(event, 0) for event in events[:-1])
        self.events.append(Kept(events[-1], frame.tokens))
        self._wake()

    def _wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()

    def _settle(self, task: asyncio.Task[None]) -> None:
        """Generation is over: a cancelled one ends the record ``cancelled`` (:func:`generate`
        books every other ending itself); readers learn that nothing more will come."""
        if task.cancelled():
            self._recorder.finish(
                self.record, "cancelled", completion_tokens=self.record.tokens_generated
            )
            self._wire.cancel()
        elif task.exception() is not None:
            _log.error("background response %s failed", self.id, exc_info=task.exception())
        self.ended = True
        self._wake()
        self._on_end(self)

    async def cancel(self) -> dict[str, Any]:
        """Stop generation now and answer the cancelled response object; a cancelled one is
        answered again as it is. One that ended otherwise cannot be cancelled (a 400, as OpenAI
        answers "Cannot cancel a completed response.")."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task])  # settled: the record is cancelled when we answer
        response = self.snapshot()
        if response["status"] != "cancelled":
            raise ApiError(400, f"Cannot cancel a {response['status']} response.")
        return response

    async def after(self, sequence_number: int) -> AsyncIterator[Kept]:
        """The events after ``sequence_number``: those kept already, then each one as it is
        generated, until generation ends."""
        position = sequence_number + 1
        while True:
            if position < len(self.events):
                yield self.events[position]
                position += 1
            elif self.ended:
                return
            else:
                await self._grew.wait()


class BackgroundResponses:
    """One app's background responses, by id, each kept until ``keep_s`` seconds after it
    ends."""

    def __init__(self, recorder: Recorder, *, keep_s: float = DEFAULT_KEEP_S) -> None:
        if keep_s < 0:
            raise ValueError(f"keep_s must be 0 or more seconds, got {keep_s}")
        self.keep_s = keep_s
        self._recorder = recorder
        self._responses: dict[str, BackgroundResponse] = {}

    def __len__(self) -> int:
        return len(self._responses)

    def start(self, record: RequestRecord, wire: Snapshots, frames: Frames) -> BackgroundResponse:
        """Start generating a background answer now."""
        response = BackgroundResponse(record, wire, self._recorder, self._ended)
        self._responses[response.id] = response
        response.start(frames)
        return response

    def get(self, response_id: str) -> BackgroundResponse:
        """The background response with this id, or a 404 in OpenAI's shape."""
        response = self._responses.get(response_id)
        if response is None:
            raise ApiError(
                404,
                f"Response with id '{response_id}' not found. The mock keeps a response only if "
                'it was created with "background": true and "stream": true, until '
                f"{self.keep_s:g} s after it ends (or POST /debug/reset).",
                param="response_id",
            )
        return response

    def reset(self) -> None:
        """Forget the responses that ended; running ones stay."""
        self._responses = {id_: r for id_, r in self._responses.items() if not r.ended}

    def _ended(self, response: BackgroundResponse) -> None:
        asyncio.get_running_loop().call_later(self.keep_s, self._forget, response)

    def _forget(self, response: BackgroundResponse) -> None:
        if self._responses.get(response.id) is response:
            del self._responses[response.id]


async def relay(
    response: BackgroundResponse, after: int, recorder: Recorder, cut: Cut | None = None
) -> AsyncIterator[bytes]:
    """One reader's body: the events after ``after``, each booked as sent once ``send`` took
    it. A reader that leaves is only a reader gone: Starlette cancels this body, nothing else."""
    sent = 0
    async for event in response.after(after):
        if cut is not None and sent >= cut.at:
            if cut.drop:
                raise ConnectionDropped(f"mock scenario drop_after: closing {response.id}")
            return
        yield event.data
        if event.tokens:
            sent += event.tokens
            recorder.sent(response.record, event.tokens)
        # A checkpoint between events, so a reader that has gone is noticed before a whole
        # backlog is booked as sent (uvicorn's send returns at once on a closed connection).
        await asyncio.sleep(0)


def stream(
    response: BackgroundResponse, after: int, recorder: Recorder, cut: Cut | None = None
) -> StreamingResponse:
    """An SSE response of the events after ``after`` (-1: all of them)."""
    return StreamingResponse(
        relay(response, after, recorder, cut), media_type="text/event-stream", headers=SSE_HEADERS
    )
