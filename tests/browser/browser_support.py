"""Serving a proxy file with the chat page mounted, for the browser tests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from labkit import ThreadServer, chat_page, load_proxy, serve

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_PROXY = ROOT / "solutions" / "proxy.py"


def serve_with_page(
    path: Path, upstream_url: str, name: str, *, detached: bool = False, **page: str
) -> ThreadServer:
    """``path``'s proxy (a fresh module) with the chat page at /chat, served on a thread;
    ``detached``: with its reader detached (see :func:`detach_reader`)."""
    module = load_proxy(path)
    if detached:
        detach_reader(module)
    module.app.mount("/chat", chat_page(**page))
    before = os.environ.get("UPSTREAM_URL")
    os.environ["UPSTREAM_URL"] = upstream_url  # read once, by the lifespan at start-up
    try:
        return serve(module.app, name=name)
    finally:
        if before is None:
            del os.environ["UPSTREAM_URL"]
        else:
            os.environ["UPSTREAM_URL"] = before


def detach_reader(module: Any) -> set[asyncio.Task[None]]:
    """Break ``module``'s proxy the way notebook 04's leaky proxy is broken: its ``relay`` reads
    the upstream in a task that nothing cancels when the client leaves, and nothing else closes
    the upstream either. Returns the set that holds those tasks (asyncio keeps only weak
    references)."""
    pumps: set[asyncio.Task[None]] = set()

    async def pump(upstream: Any, queue: asyncio.Queue[str | None]) -> None:
        async for line in upstream.aiter_lines():
            await queue.put(line)
        await queue.put(None)
        await upstream.aclose()

    async def relay(upstream: Any, client_wants_usage: bool) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        task = asyncio.create_task(pump(upstream, queue))  # nobody will cancel this
        pumps.add(task)
        task.add_done_callback(pumps.discard)
        while (line := await queue.get()) is not None:
            yield f"{line}\n".encode()

    module.relay = relay
    # The reference route also closes the upstream in a BackgroundTask, which Starlette runs
    # even after the client left: a second link to break, or the hang-up still gets through.
    module.BackgroundTask = lambda *args, **kwargs: None
    return pumps
