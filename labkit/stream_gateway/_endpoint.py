"""The gateway as a FastAPI app: ``POST /v1/answers`` streams one answer through the
:class:`~labkit.stream_gateway._relay.Relay`, ``GET /metrics`` exports its metrics, and the app's
lifespan holds the one upstream client (made by the proxy's own ``make_client``).

This is the only module of the gateway that loads FastAPI.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from labkit.stream_gateway._metrics import GatewayMetrics
from labkit.stream_gateway._parts import ProxyParts
from labkit.stream_gateway._policies import (
    DEFAULT_RESTART,
    Immediate,
    ReleasePolicy,
    RestartPolicy,
)
from labkit.stream_gateway._relay import Answer, Relay

ANSWERS_PATH: Final = "/v1/answers"


def make_stream_gateway(
    parts: ProxyParts,
    upstream_url: str,
    *,
    release: Callable[[], ReleasePolicy] = Immediate,
    restart: RestartPolicy = DEFAULT_RESTART,
) -> FastAPI:
    """The gateway app over ``parts`` (a proxy module) and the upstream at ``upstream_url``.

    ``release`` makes one validation buffer per upstream attempt; its ``name`` attribute (or
    its ``__name__``) is what ``gateway.start`` reports."""
    relay = Relay(parts=parts, release=release, restart=restart, metrics=GatewayMetrics())
    app = FastAPI(lifespan=_holding_a_client(parts, upstream_url))
    app.state.metrics = relay.metrics
    _route_metrics(app, relay.metrics)
    _route_answers(app, relay)
    return app


def _holding_a_client(
    parts: ProxyParts, upstream_url: str
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: one upstream client, made by the proxy, in ``app.state.client``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with parts.make_client(upstream_url) as client:
            app.state.client = client
            yield

    return lifespan


def _route_metrics(app: FastAPI, metrics: GatewayMetrics) -> None:
    @app.get("/metrics")
    async def export() -> Response:
        return Response(metrics.exposition(), media_type=metrics.media_type)


def _route_answers(app: FastAPI, relay: Relay) -> None:
    parts = relay.parts

    @app.post(ANSWERS_PATH)
    async def answers(request: Request) -> Response:
        if "last-event-id" in request.headers:
            return _no_replay(parts, request.headers["last-event-id"])
        body = await parts.read_request(request)
        if isinstance(body, Response):
            return body
        answer = Answer(request_id=f"req_{uuid.uuid4().hex[:24]}", started=time.monotonic())
        stream = relay.stream(
            request.app.state.client, body, parts.upstream_headers(request), answer
        )
        headers = {**parts.SSE_HEADERS, "X-Request-Id": answer.request_id}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def _no_replay(parts: ProxyParts, last_event_id: str) -> JSONResponse:
    """409: the gateway keeps no replay buffer, so the generation the reader asks for is gone."""
    message = (
        "this gateway keeps no replay buffer: the generation behind "
        f"Last-Event-ID {last_event_id} is gone. Send a new request "
        "(its answer will be a different one, billed again)."
    )
    return JSONResponse(parts.error_body(message, "replay_not_supported"), 409)
