"""The least a relay on the reference's stack can cost: httpx, Starlette and uvicorn on asyncio,
with none of the lessons' parts.

Each request is forwarded as it came (its bytes, its ``x-mock-scenario`` header) over one
shared ``httpx.AsyncClient``, and the upstream's body is handed to Starlette's
``StreamingResponse`` piece by piece as ``aiter_raw`` yields it. No reader task, no queue, no
heartbeat, no idle or stall deadline, no usage, no error events, no request checks, no
FastAPI. It is not a correct proxy (the grader would fail it on several checks); it is the floor
under ``solutions/proxy.py``'s CPU per event on the same libraries, so that the difference
between the two is what the lessons' parts cost (docs/measurements.md, "The relay's floor on
its own libraries, and the pool's storm"). Run:
``UPSTREAM_URL=http://127.0.0.1:8001 uvicorn bench.proxies.httpx_floor:app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from solutions.client_seam import upstream_url
from solutions.proxy import CHAT_PATH, FORWARDED_HEADERS, make_client


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with make_client(upstream_url()) as client:  # the reference's client, pool and all
        app.state.client = client
        yield


async def chat_completions(request: Request) -> Response:
    client: httpx.AsyncClient = request.app.state.client
    headers = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
    headers["content-type"] = "application/json"
    upstream = await client.send(
        client.build_request("POST", CHAT_PATH, content=await request.body(), headers=headers),
        stream=True,
    )
    return StreamingResponse(
        upstream.aiter_raw(),
        status_code=upstream.status_code,
        media_type=upstream.headers.get("content-type"),
        background=BackgroundTask(upstream.aclose),
    )


app = Starlette(routes=[Route(CHAT_PATH, chat_completions, methods=["POST"])], lifespan=lifespan)
