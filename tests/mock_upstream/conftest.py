"""Fixtures: a real uvicorn server on 127.0.0.1, port 0, in a background thread."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
from mock_support import FAST, LiveServer, live_server


@pytest.fixture(scope="module")
def server_module() -> Iterator[LiveServer]:
    yield from live_server(FAST)


@pytest.fixture
def server(server_module: LiveServer) -> LiveServer:
    """A shared fast server, reset before each test."""
    server_module.client.post("/debug/reset").raise_for_status()
    return server_module


@pytest.fixture
def fresh_server() -> Iterator[LiveServer]:
    """A server of its own (for tests about per-app state)."""
    yield from live_server(FAST)


@pytest.fixture
def openai_client(server: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="sk-mock", max_retries=0, timeout=5.0
    ) as client:
        yield client


@pytest.fixture
def anthropic_client(server: LiveServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=server.url, api_key="sk-mock", max_retries=0, timeout=5.0
    ) as client:
        yield client
