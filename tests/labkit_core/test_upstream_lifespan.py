"""``upstream_lifespan`` gives a notebook's throwaway proxy one client on the upstream for the
app's life, and ``SSE_HEADERS`` are the headers ``proxy.py`` answers a stream with."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from labkit import SSE_HEADERS, UPSTREAM_TIMEOUT, ExternalServer, upstream_lifespan

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "proxy.py"


def test_the_app_holds_one_client_on_the_upstream_while_it_is_served() -> None:
    async def serve_once() -> httpx.AsyncClient:
        app = SimpleNamespace(state=SimpleNamespace())
        async with upstream_lifespan("http://127.0.0.1:9")(app):
            client = app.state.client
            assert isinstance(client, httpx.AsyncClient) and not client.is_closed
            assert str(client.base_url) == "http://127.0.0.1:9"
            assert client.timeout == UPSTREAM_TIMEOUT
        return client

    assert asyncio.run(serve_once()).is_closed


def test_a_server_handle_and_a_timeout_of_its_own() -> None:
    async def base_and_timeout() -> tuple[str, httpx.Timeout]:
        app = SimpleNamespace(state=SimpleNamespace())
        handle = ExternalServer("http://127.0.0.1:9", name="upstream")
        async with upstream_lifespan(handle, timeout=60.0)(app):
            return str(app.state.client.base_url), app.state.client.timeout

    assert asyncio.run(base_and_timeout()) == ("http://127.0.0.1:9", httpx.Timeout(60.0))


def test_the_sse_headers_are_the_reference_proxys() -> None:
    tree = ast.parse(SOLUTION.read_text())
    found = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [ast.unparse(target) for target in node.targets] == ["SSE_HEADERS"]
    ]
    assert found == [dict(SSE_HEADERS)]
    with pytest.raises(TypeError):
        SSE_HEADERS["Cache-Control"] = "no-cache"  # type: ignore[index]
