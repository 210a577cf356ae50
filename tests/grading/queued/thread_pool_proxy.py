"""A forwarding proxy whose streams each hold one of WORKERS threads for their whole life, the way
a thread-per-request server (Apache's worker MPM, a WSGI server) does: the streams beyond WORKERS
wait for a thread before they reach the upstream. Its other answers need no thread, so it answers
probes at once. Used to prove that ``concurrency`` fails such a proxy, saying the streams waited."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

WORKERS = 64  # fewer than the streams concurrency opens: the rest wait for one
UPSTREAM = os.environ["UPSTREAM_URL"].rstrip("/")
THREADS = anyio.CapacityLimiter(WORKERS)

app = FastAPI()


def _relay(body: bytes, queue: asyncio.Queue[bytes | None]) -> None:
    """One stream on one thread, start to end: a blocking client, as thread-per-request does."""
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST",
            f"{UPSTREAM}/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
        ) as response,
    ):
        for chunk in response.iter_raw():
            anyio.from_thread.run(queue.put, chunk)
    anyio.from_thread.run(queue.put, None)


@app.post("/v1/chat/completions")
async def chat_completions(request: Request) -> StreamingResponse:
    body = await request.body()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    task = asyncio.create_task(anyio.to_thread.run_sync(_relay, body, queue, limiter=THREADS))

    async def chunks() -> AsyncIterator[bytes]:
        while (chunk := await queue.get()) is not None:
            yield chunk
        await task

    return StreamingResponse(chunks(), media_type="text/event-stream")


@app.get("/v1/models")
async def models() -> JSONResponse:
    return JSONResponse({"object": "list", "data": []})
