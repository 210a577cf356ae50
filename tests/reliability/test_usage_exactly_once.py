"""One usage line per request, even when the client leaves at awkward moments."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from upstream_fakes import ScriptedUpstream, chat_frames

from labkit import capture_stream, serve
from labkit.servers import ServerHandle
from solutions import aiohttp_proxy
from solutions import proxy as reference

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"


@pytest.fixture
def late_upstream() -> Iterator[tuple[ScriptedUpstream, ServerHandle]]:
    upstream = ScriptedUpstream(
        chunks=[f.encode() for f in chat_frames(["late"])], headers_delay_s=1.0
    )
    with serve(upstream, name="late-headers-upstream") as server:
        yield upstream, server


@pytest.mark.parametrize("app", [reference.app, aiohttp_proxy.app], ids=["httpx", "aiohttp"])
def test_client_leaving_while_upstream_headers_are_late_still_gets_a_usage_line(
    late_upstream: tuple[ScriptedUpstream, ServerHandle],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app: Any,
) -> None:
    """An upstream that sends its headers with the first token (1 s here): the client leaves
    after 0.3 s, while the route still waits in ``client.send`` (outside the body, where
    Starlette does not watch for a disconnect). When the response starts, the body runs up to
    its first wait, is cancelled there, and logs ``cancelled`` once."""
    log = tmp_path / "usage.jsonl"
    monkeypatch.setenv("UPSTREAM_URL", late_upstream[1].url)
    monkeypatch.setenv("USAGE_LOG", str(log))
    with serve(app, name="late-headers-proxy") as proxy:
        cap = capture_stream(proxy.url + CHAT, json={"stream": True}, disconnect_after_s=0.3)
        assert cap.terminal == "disconnected"
        time.sleep(1.5)  # the headers arrive, the response starts and ends
        lines = log.read_text().splitlines() if log.exists() else []
    assert [json.loads(line)["outcome"] for line in lines] == ["cancelled"]


def test_response_started_after_the_client_left_still_gets_a_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disconnect is already queued when the response starts (the ASGI app is driven by
    hand): the body still runs up to its first wait, is cancelled there and logs once."""
    log = tmp_path / "usage.jsonl"
    monkeypatch.setenv("USAGE_LOG", str(log))
    messages = [
        {"type": "http.request", "body": json.dumps({"stream": True}).encode(), "more_body": False}
    ]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": CHAT,
        "raw_path": CHAT.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    upstream = ScriptedUpstream(chunks=[f.encode() for f in chat_frames(["never read"])])
    with serve(upstream, name="unstarted-upstream") as server:

        async def run() -> None:
            async with httpx.AsyncClient(base_url=server.url) as client:
                reference.app.state.client = client
                try:
                    await reference.app(scope, receive, send)
                finally:
                    del reference.app.state.client

        asyncio.run(run())
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["outcome"] for line in lines] == ["cancelled"]
