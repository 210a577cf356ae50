"""The upstream's chunks, as the gateway reads them: parsed, up to ``[DONE]``, and every other
ending a :class:`~labkit.errors.GatewayFailure` whose ``reason`` says which.

``upstream_status`` (unreachable, or a status of 400 and above), ``upstream_error`` (an error
in the stream) and ``upstream_dropped`` (the stream failed or ended before ``[DONE]``) are the
failures a :class:`~labkit.stream_gateway.RestartPolicy` may answer with a fresh request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any, Final

import httpx

from labkit.errors import GatewayFailure as Failure  # one attempt ended without a usable answer
from labkit.stream_gateway._parts import ProxyParts

CHAT_PATH: Final = "/v1/chat/completions"


async def upstream_chunks(
    parts: ProxyParts, client: httpx.AsyncClient, request: httpx.Request
) -> AsyncGenerator[dict[str, Any], None]:
    """The upstream's chunks, parsed, up to its ``[DONE]``. Every other ending raises
    ``Failure``: a status, an in-stream error, a drop. Broken frames are skipped."""
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as problem:
        message = f"cannot reach the upstream: {type(problem).__name__}"
        raise Failure("upstream_status", message) from None
    try:
        if upstream.status_code >= 400:
            await upstream.aread()
            raise Failure("upstream_status", f"the upstream answered {upstream.status_code}")
        try:
            async for event in parts.sse_events(parts.sse_lines(upstream.aiter_bytes())):
                data = parts.event_data(event)
                if data == "[DONE]":
                    return
                chunk = _parsed(data)
                if chunk is not None:
                    yield chunk
        except httpx.HTTPError as problem:
            message = f"the upstream stream failed: {type(problem).__name__}"
            raise Failure("upstream_dropped", message) from None
        raise Failure("upstream_dropped", "the upstream closed the stream before it finished")
    finally:
        await upstream.aclose()


def _parsed(data: str) -> dict[str, Any] | None:
    """One event's chunk; ``None`` for a broken frame (nothing in it can be released); an
    ``error`` in it raises ``Failure``."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return None
    if "error" in chunk:
        error = chunk["error"] if isinstance(chunk["error"], dict) else {}
        raise Failure("upstream_error", str(error.get("message", "upstream error")))
    return chunk  # type: ignore[no-any-return]  # a chunk is a JSON object
