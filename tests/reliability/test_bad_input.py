"""Bad input never makes a 500: property tests of the reference proxy's and the mock's request
handling, and upstream frames cut, broken or decorated in every way the proxy must survive."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from upstream_fakes import ScriptedUpstream, chat_frames

from labkit import capture_stream, serve
from labkit.servers import ServerHandle
from mock_upstream import Scenario, create_app
from mock_upstream.bodies import MAX_BODY_BYTES as MOCK_MAX_BODY
from mock_upstream.scenario import KEYS
from solutions import aiohttp_proxy
from solutions import proxy as reference

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"
ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/messages")
FAST = Scenario(ttft_ms=0, tps=1000.0, tokens=2)
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
wrong = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=10),
    st.lists(st.integers(), max_size=3),
)
# A scenario value that is never valid for any key (so no example asks for a long stall).
bad_scenario_value = st.one_of(
    st.text(alphabet="abcxyz!?", min_size=1, max_size=6),
    st.lists(st.integers(), max_size=2),
    st.just(-1),
    st.just(True),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]) | wrong},
        optional={"content": st.text(max_size=30) | wrong, "name": wrong},
    )
    | wrong,
    max_size=3,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["mock-gpt"]) | wrong,
        "messages": messages | wrong,
        "stream": st.booleans() | wrong,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": wrong}) | wrong,
        "max_tokens": st.integers(-3, 4) | wrong,
        "mock": st.dictionaries(st.sampled_from([*KEYS, "nope"]), bad_scenario_value, max_size=2)
        | wrong,
        "unknown_field": json_values,
    },
)


@pytest.fixture(scope="module")
def mock() -> Iterator[ServerHandle]:
    with serve(create_app(FAST), name="bad-input-mock") as server:
        yield server


# Both references: the one notebook 06 builds (httpx) and the one to deploy (aiohttp).
REFERENCES = {"httpx": reference.app, "aiohttp": aiohttp_proxy.app}


@pytest.fixture(scope="module", params=list(REFERENCES))
def proxy(
    mock: ServerHandle, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerHandle]:
    log = tmp_path_factory.mktemp("bad-input") / "usage.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UPSTREAM_URL", mock.url)
        patch.setenv("USAGE_LOG", str(log))
        with serve(REFERENCES[request.param], name="bad-input-proxy") as server:
            yield server


def assert_openai_shaped(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"], response.text
        assert isinstance(error["type"], str), response.text


def assert_provider_shaped(route: str, response: httpx.Response) -> None:
    assert response.status_code < 500, (route, response.status_code, response.text[:300])
    if response.status_code < 400:
        return
    body = response.json()
    if route == "/v1/messages":
        assert body["type"] == "error", body
        assert isinstance(body["error"]["type"], str) and body["error"]["message"], body
    else:
        assert isinstance(body["error"]["message"], str) and body["error"]["type"], body


def _read(response: httpx.Response) -> httpx.Response:
    response.read()
    return response


@SETTINGS
@given(body=bodies | json_values)
def test_proxy_answers_any_json_body_without_a_500(proxy: ServerHandle, body: Any) -> None:
    response = httpx.post(proxy.url + CHAT, json=body, timeout=30.0)
    assert_openai_shaped(response)


@SETTINGS
@given(content=st.binary(max_size=200))
def test_proxy_answers_any_bytes_without_a_500(proxy: ServerHandle, content: bytes) -> None:
    response = httpx.post(proxy.url + CHAT, content=content, timeout=30.0)
    assert_openai_shaped(response)


@SETTINGS
@given(route=st.sampled_from(ROUTES), body=bodies | json_values)
def test_mock_answers_any_json_body_in_the_providers_shape(
    mock: ServerHandle, route: str, body: Any
) -> None:
    response = httpx.post(mock.url + route, json=body, timeout=30.0)
    assert_provider_shaped(route, response)


@SETTINGS
@given(route=st.sampled_from(ROUTES), content=st.binary(max_size=200))
def test_mock_answers_any_bytes_in_the_providers_shape(
    mock: ServerHandle, route: str, content: bytes
) -> None:
    response = httpx.post(mock.url + route, content=content, timeout=30.0)
    assert_provider_shaped(route, response)


@SETTINGS
@given(
    key=st.sampled_from([*KEYS, "bogus"]),
    value=st.text(alphabet="abcxyz!?-_", min_size=1, max_size=8),
)
def test_mock_rejects_invalid_scenario_header_with_a_400_naming_it(
    mock: ServerHandle, key: str, value: str
) -> None:
    header = f"{key}={value}"
    response = httpx.post(
        mock.url + CHAT,
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        headers={"X-Mock-Scenario": header},
        timeout=30.0,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_scenario" and key in error["message"], error


def _chunked(total: int, piece: int = 65_536) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * min(piece, total - sent)
        sent += piece


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_proxy_rejects_a_huge_body_with_413(proxy: ServerHandle, chunked: bool) -> None:
    size = reference.MAX_BODY_BYTES + 10
    content: Any = _chunked(size) if chunked else b" " * size
    response = httpx.post(proxy.url + CHAT, content=content, timeout=30.0)
    assert response.status_code == 413
    assert "larger than" in response.json()["error"]["message"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_mock_rejects_a_huge_body_with_413(mock: ServerHandle, route: str, chunked: bool) -> None:
    size = MOCK_MAX_BODY + 10
    content: Any = _chunked(size) if chunked else b" " * size
    response = httpx.post(mock.url + route, content=content, timeout=30.0)
    assert response.status_code == 413
    body = response.json()
    message = body["error"]["message"]
    assert "larger than" in message
    if route == "/v1/messages":
        assert body["type"] == "error"


# ---------------------------------------------------------------------------------------------
# Upstream frames the proxy must survive


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[ScriptedUpstream, ServerHandle]]:
    upstream = ScriptedUpstream()
    with serve(upstream, name="scripted-upstream") as server:
        yield upstream, server


@pytest.fixture(scope="module", params=list(REFERENCES))
def scripted_proxy(
    scripted: tuple[ScriptedUpstream, ServerHandle],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[ServerHandle, Path]]:
    log = tmp_path_factory.mktemp("frames") / "usage.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UPSTREAM_URL", scripted[1].url)
        patch.setenv("USAGE_LOG", str(log))
        with serve(REFERENCES[request.param], name="scripted-proxy") as server:
            yield server, log


def _client_events_are_valid(cap: Any) -> None:
    assert cap.malformed_events == 0, cap.body
    for event in cap.events:
        if event.data != "[DONE]":
            json.loads(event.data)  # every forwarded event is valid JSON


pieces_text = st.lists(
    st.text(alphabet='abc é€😀 \n"\\', min_size=1, max_size=6), min_size=1, max_size=6
)


@SETTINGS
@given(
    pieces=pieces_text,
    crlf=st.booleans(),
    comments=st.booleans(),
    event_lines=st.booleans(),
    cuts=st.lists(st.integers(1, 10_000), max_size=8),
)
def test_frames_cut_anywhere_reach_the_client_intact(
    scripted: tuple[ScriptedUpstream, ServerHandle],
    scripted_proxy: tuple[ServerHandle, Path],
    pieces: list[str],
    crlf: bool,
    comments: bool,
    event_lines: bool,
    cuts: list[int],
) -> None:
    """Split UTF-8, CRLF, comment lines and `event:` lines: same text, valid events, [DONE]."""
    frames = chat_frames(pieces)
    if event_lines:
        frames = [f"event: message\n{f}" for f in frames]
    if comments:
        frames = [f": upstream says hi\n\n{f}" for f in frames]
    raw = "".join(frames)
    if crlf:
        raw = raw.replace("\n", "\r\n")
    data = raw.encode()
    points = sorted({c % len(data) for c in cuts} - {0})
    scripted[0].chunks = [
        data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)
    ]
    cap = capture_stream(scripted_proxy[0].url + CHAT, json={"model": "m", "stream": True})
    assert cap.terminal == "done", cap.body
    assert cap.text == "".join(pieces)
    _client_events_are_valid(cap)


@pytest.mark.parametrize(
    "bad_frame",
    [
        b'data: {"id": "x", "choices": [{"de\n\n',  # broken JSON
        b"data: \xff\xfe not utf-8\n\n",  # not even text
        b"data: [1, 2, 3]\n\n",  # JSON, but not a chunk
        b"data: \n\n",  # empty data
        b"retry: 100\n\n",  # a field the proxy does not use
    ],
    ids=["broken-json", "bad-utf8", "json-array", "empty-data", "retry-only"],
)
def test_malformed_upstream_frame_never_reaches_the_client(
    scripted: tuple[ScriptedUpstream, ServerHandle],
    scripted_proxy: tuple[ServerHandle, Path],
    bad_frame: bytes,
) -> None:
    frames = [f.encode() for f in chat_frames(["one", " two"])]
    scripted[0].chunks = [*frames[:2], bad_frame, *frames[2:]]
    cap = capture_stream(scripted_proxy[0].url + CHAT, json={"model": "m", "stream": True})
    assert cap.status == 200
    assert cap.terminal in ("done", "error"), cap.body
    _client_events_are_valid(cap)
    # the proxy still serves the next request
    scripted[0].chunks = [f.encode() for f in chat_frames(["ok"])]
    again = capture_stream(scripted_proxy[0].url + CHAT, json={"model": "m", "stream": True})
    assert again.terminal == "done" and again.text == "ok"


def test_anthropic_frames_without_event_lines_are_not_applicable(proxy: ServerHandle) -> None:
    """The reference serves no /v1/messages route: Anthropic frames never pass through it."""
    response = httpx.post(proxy.url + "/v1/messages", json={}, timeout=10.0)
    assert response.status_code in (404, 405)


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
@pytest.mark.parametrize("target", ["proxy", "mock"])
def test_non_standard_json_numbers_get_a_4xx(
    proxy: ServerHandle, mock: ServerHandle, target: str, literal: bytes
) -> None:
    """Python's json module reads NaN and Infinity; re-encoding them for the upstream fails."""
    server = proxy if target == "proxy" else mock
    content = b'{"model": "m", "stream": true, "temperature": ' + literal + b', "messages": []}'
    response = httpx.post(server.url + CHAT, content=content, timeout=30.0)
    assert_openai_shaped(response)
