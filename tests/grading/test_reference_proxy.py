"""Both reference proxies beyond what the checks measure: unary requests, bad requests, startup.

The httpx one is notebook 06's; the aiohttp one (``solutions.aiohttp_proxy``) is the
same relay over a faster client. Each test here runs against both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from labkit import capture_stream, serve
from labkit.errors import AppStartupError
from labkit.servers import ServerHandle
from solutions import aiohttp_proxy
from solutions import proxy as reference

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


APPS = {"httpx": reference.app, "aiohttp": aiohttp_proxy.app}


@pytest.fixture(params=list(APPS))
def app(request: pytest.FixtureRequest) -> Any:
    return APPS[request.param]


@pytest.fixture
def reference_proxy(
    app: Any, mock: ServerHandle, usage_log: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerHandle]:
    """Each reference on a thread, forwarding to ``mock`` and logging to ``usage_log``."""
    monkeypatch.setenv("UPSTREAM_URL", mock.url)
    monkeypatch.setenv("USAGE_LOG", str(usage_log))
    with serve(app, name="reference-proxy") as server:
        yield server


def log_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_unary_request_is_forwarded_and_its_usage_logged(
    reference_proxy: ServerHandle, usage_log: Path
) -> None:
    response = httpx.post(reference_proxy.url + CHAT, json={**BODY, "mock": {"tokens": 7}})
    assert response.status_code == 200
    answer = response.json()
    assert answer["usage"]["completion_tokens"] == 7
    [line] = log_lines(usage_log)
    assert line == {
        "id": answer["id"],
        "prompt_tokens": answer["usage"]["prompt_tokens"],
        "completion_tokens": 7,
        "total_tokens": answer["usage"]["total_tokens"],
        "outcome": "completed",
    }


def test_streams_disable_caching_and_proxy_buffering(reference_proxy: ServerHandle) -> None:
    body = {**BODY, "stream": True, "mock": {"ttft_ms": 0, "tokens": 3, "tps": 1000}}
    capture = capture_stream(reference_proxy.url + CHAT, json=body)
    assert capture.terminal == "done"
    assert capture.headers["content-type"].startswith("text/event-stream")
    assert capture.headers["cache-control"] == "no-cache, no-transform"
    assert capture.headers["x-accel-buffering"] == "no"


def test_usage_chunk_reaches_only_clients_that_asked(reference_proxy: ServerHandle) -> None:
    body = {**BODY, "stream": True, "mock": {"ttft_ms": 0, "tokens": 5, "tps": 1000}}
    plain = capture_stream(reference_proxy.url + CHAT, json=body)
    asked = capture_stream(
        reference_proxy.url + CHAT, json={**body, "stream_options": {"include_usage": True}}
    )
    assert plain.usage is None
    assert asked.usage is not None and asked.usage["completion_tokens"] == 5


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"{not json", "the body is not JSON"), (b"[1, 2]", "the body must be a JSON object")],
)
def test_malformed_request_gets_openai_shaped_400(
    reference_proxy: ServerHandle, content: bytes, message: str
) -> None:
    response = httpx.post(reference_proxy.url + CHAT, content=content)
    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


def test_unreachable_upstream_gets_502(
    app: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("UPSTREAM_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("USAGE_LOG", str(tmp_path / "usage.jsonl"))
    with serve(app, name="reference-no-upstream") as proxy:
        response = httpx.post(proxy.url + CHAT, json=BODY)
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_error"
    assert log_lines(tmp_path / "usage.jsonl")[0]["outcome"] == "error"


def test_missing_upstream_url_stops_startup_with_a_clear_message(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("UPSTREAM_URL", raising=False)
    with pytest.raises(AppStartupError) as error:
        serve(app, name="reference-no-env")
    assert "UPSTREAM_URL is not set" in str(error.value) or "RuntimeError" in str(error.value)
