"""Small streaming apps the labkit core tests serve (imported by conftest and tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

TOKENS = 12
INTERVAL_S = 0.04


def chat_frame(text: str) -> str:
    chunk = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def make_stream_app() -> FastAPI:
    """``/trickle`` sends a token at once, then one per interval; ``/buffered`` waits as long
    as that takes, then sends them all.

    ``app.state.outcomes`` records how each body generator ended: ``completed`` or
    ``cancelled`` (the client went away).
    """
    app = FastAPI()
    app.state.outcomes = []

    async def tokens(request: Request, *, buffered: bool) -> AsyncIterator[str]:
        n = int(request.query_params.get("n", TOKENS))
        interval = float(request.query_params.get("interval", INTERVAL_S))
        try:
            if buffered:
                await asyncio.sleep((n - 1) * interval)
                yield "".join(chat_frame(f"t{i} ") for i in range(n)) + "data: [DONE]\n\n"
            else:
                for i in range(n):
                    if i:
                        await asyncio.sleep(interval)
                    yield chat_frame(f"t{i} ")
                yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            app.state.outcomes.append("cancelled")
            raise
        app.state.outcomes.append("completed")

    @app.post("/trickle")
    async def trickle(request: Request) -> StreamingResponse:
        return StreamingResponse(tokens(request, buffered=False), media_type="text/event-stream")

    @app.post("/buffered")
    async def buffered(request: Request) -> StreamingResponse:
        return StreamingResponse(tokens(request, buffered=True), media_type="text/event-stream")

    return app
