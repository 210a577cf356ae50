"""Tiny upstreams for what the mock will not do: frames cut anywhere, headers that come late,
and a record of the headers each request carried."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

Scope = dict[str, Any]


@dataclass
class ScriptedUpstream:
    """An ASGI app that answers every POST with ``status`` and then exactly ``chunks`` (bytes).

    ``headers_delay_s`` waits before the response starts (an upstream that sends its headers
    with the first token). ``seen_headers`` keeps each request's headers.
    """

    chunks: list[bytes] = field(default_factory=list)
    status: int = 200
    content_type: bytes = b"text/event-stream"
    headers_delay_s: float = 0.0
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.seen_headers.append(headers)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        if self.headers_delay_s:
            await asyncio.sleep(self.headers_delay_s)
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [(b"content-type", self.content_type)],
            }
        )
        for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b""})


def chat_frames(text_pieces: list[str], completion_id: str = "chatcmpl-fake") -> list[str]:
    """A well-formed Chat Completions stream (one chunk per piece), usage and ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        data = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return "data: " + json.dumps(data, ensure_ascii=False) + "\n\n"

    usage = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": len(text_pieces),
            "total_tokens": 3 + len(text_pieces),
        },
    }
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": piece}) for piece in text_pieces),
        chunk({}, "stop"),
        "data: " + json.dumps(usage) + "\n\n",
        "data: [DONE]\n\n",
    ]
