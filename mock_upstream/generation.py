"""How generation meets the socket: it runs ahead of a slow reader, as engines do, or waits.

:func:`mock_upstream.stream.generate` plays an answer at the scenario's pace into SSE frames,
counting each token as generated (and billed) when it is made. The body generator that
Starlette's ``StreamingResponse`` drives hands each frame to uvicorn's ``send``, which waits
while the client's socket is full. What sits between the two is one of two strategies, chosen
by the scenario's ``pause_on_backpressure``::

    RunAhead (default)   generate --paced--> [ buffer ] --as the socket takes them--> send
    InStep               generate --paced--> send   (send waits, and generation with it)

:class:`RunAhead` runs generation as a task of its own. A reader that reads nothing leaves its
socket full, and generation goes on to the end anyway, as on a real engine: llama.cpp's
llama-server decoded all 800 tokens asked of it for a client that read nothing for 24 s, and
vLLM merges the output a lagging consumer has not taken yet. The buffer holds what was
generated and not yet sent (for the ``backpressure`` check's 400,000 tokens to a stalled
reader, about 43 MB of frames, as an engine's server would hold them); it is emptied and let
go when the request ends, however it ends.

:class:`InStep` (``pause_on_backpressure: true``) generates inside the body generator, so
while ``send`` waits, nothing is generated. No engine we measured behaves so; it is kept for
experiments that want a paused upstream.

Either way a client that leaves stops generation at once: :meth:`Generation.stop` cancels the
task (or, in step, generation is waiting inside the body that was cancelled), so no token is
generated after the disconnect.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Final, NamedTuple, Protocol


class Frame(NamedTuple):
    """Bytes for the socket, and how many completion tokens they carry. (A named tuple: a long
    answer to a stalled reader buffers hundreds of thousands of them.)"""

    data: bytes
    tokens: int = 0
    drop: bool = False  # drop_after: close the connection here, after the frames before it


DROP: Final = Frame(b"", drop=True)

Frames = AsyncGenerator[Frame, None]


class Generation(Protocol):
    """Where a streamed body takes its frames from."""

    def frames(self) -> Frames:
        """The frames in order, each as soon as it is generated and the body asks for it."""
        ...

    def stop(self) -> None:
        """The request is over (the client left, or the body ended): generate nothing more and
        let go of what was not sent. Safe to call more than once."""
        ...


class RunAhead:
    """Generation as a task of its own, into a buffer the body empties as fast as it can send.

    The task starts when the body first asks for a frame (when the response has started), as
    generation did inside the body; :meth:`stop` cancels it and empties the buffer."""

    def __init__(self, source: Frames) -> None:
        self._source = source
        self._buffer: deque[Frame] = deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def backlog(self) -> int:
        """Frames generated and not yet handed to the socket."""
        return len(self._buffer)

    async def _generate(self) -> None:
        async with aclosing(self._source) as frames:
            async for frame in frames:
                self._buffer.append(frame)
                self._ready.set()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved here too, so a stopped body leaves no warning behind
        self._ready.set()

    async def frames(self) -> Frames:
        if self._stopped:
            return
        task = self._task = asyncio.create_task(self._generate(), name="mock-upstream generation")
        task.add_done_callback(self._ended)
        while True:
            while self._buffer:
                yield self._buffer.popleft()
                if self._buffer:
                    # A checkpoint between frames of a backlog: once the client has gone,
                    # uvicorn's send returns at once, and without it the whole backlog would
                    # be "sent" before Starlette's disconnect listener got to cancel the body.
                    await asyncio.sleep(0)
            if task.done():
                task.result()  # a generation that failed fails the body too
                return
            self._ready.clear()
            await self._ready.wait()

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
        self._buffer.clear()


class InStep:
    """Generation inside the body generator (``pause_on_backpressure``): while ``send`` waits
    for a full socket, the next token waits too."""

    def __init__(self, source: Frames) -> None:
        self._source = source

    def frames(self) -> Frames:
        return self._source

    def stop(self) -> None:
        """Nothing to cancel: generation waits in the body, and ends with it."""


#: ``pause_on_backpressure`` -> the strategy.
STRATEGIES: Final[dict[bool, Callable[[Frames], Generation]]] = {False: RunAhead, True: InStep}


def generation_for(pause_on_backpressure: bool, source: Frames) -> Generation:
    """The strategy a scenario asks for, around the answer's frames."""
    return STRATEGIES[pause_on_backpressure](source)
