"""Noticing a client that hangs up while the route function still works, before any response.

Starlette watches the client only while a ``StreamingResponse`` sends its body. What a route
does before it returns (wait for a slot, generate a whole answer for a unary response) is not
watched: a client that leaves meanwhile is noticed, if ever, when the response is sent, and
the work goes on to its end. A real engine does better: vLLM's server cancels its handler on
``http.disconnect``, which aborts the request, waiting or running.

:func:`while_connected` does the same for one piece of work: it runs it as a task beside a
watcher that awaits ``receive()`` until uvicorn says ``http.disconnect`` (the request body has
been read already, so the next message is the disconnect), and whichever ends first cancels
the other::

    work     ----generating----x  (cancelled)
    watcher  ----receive()-----+  http.disconnect --> ClientLeft

A client that leaves is noticed within a millisecond or two of its connection closing, and the
work stops at its next ``await``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.types import Receive

T = TypeVar("T")


class ClientLeft(Exception):
    """The client disconnected before the work it asked for was done (the work was cancelled)."""


async def until_disconnect(receive: Receive) -> None:
    """Return when the server says the client has gone."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def while_connected(receive: Receive, work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result, or :class:`ClientLeft` once it was cancelled because the client left.

    ``receive`` is the request's ASGI ``receive`` with the body already read. Work that ends
    in the same instant as the disconnect counts as done: its result is returned (sending it
    is then a no-op). An exception of the work's own propagates as it is."""
    job = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(receive))
    try:
        await asyncio.wait((job, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (job, watcher):
            task.cancel()
        await asyncio.gather(job, watcher, return_exceptions=True)
    if not job.cancelled():
        return job.result()
    watcher.result()  # a receive() that failed fails here, not as a hang-up
    raise ClientLeft("the client disconnected before the answer was ready")
