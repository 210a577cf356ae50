"""Whole answers are gzip-encoded when the request accepts gzip, as providers send them; streams
and errors never are. ``Accept-Encoding`` is read with its weights (RFC 9110, 12.5.3)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from mock_support import USER, LiveServer

from mock_upstream.encoding import accepts_gzip

CHAT = "/v1/chat/completions"
BODY = {"model": "mock-gpt", "messages": USER, "seed": 5}
GZIP_MAGIC = b"\x1f\x8b"


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip", True),
        ("gzip, deflate", True),  # httpx, and so the openai and anthropic SDKs
        ("gzip, deflate, br, zstd", True),  # a browser
        ("GZip", True),
        ("x-gzip", True),
        ("gzip;q=0.5", True),
        ("gzip ; q=0.001", True),
        ("br;q=1.0, gzip;q=0.8, *;q=0.1", True),
        ("*", True),
        ("*;q=0.3", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip;Q=0", False),
        ("gzip;q=0, *", False),  # the named coding wins over the wildcard
        ("*;q=0", False),
        ("*;q=0, gzip", True),
        ("deflate", False),
        ("br, zstd", False),
        ("identity", False),
        ("", False),  # an empty value accepts only the identity
        (None, False),  # no header: answered plain, as servers do
        ("gzip;q=2", False),  # a malformed weight says nothing
        ("gzip;q=abc", False),
        ("gzip;q=0.5000", False),
        ("gzip;q=abc, *", True),
        (" , gzip", True),
    ],
)
def test_accept_encoding_is_read_with_its_weights(header: str | None, accepted: bool) -> None:
    assert accepts_gzip(header) is accepted


def raw_post(
    server: LiveServer, body: dict[str, Any], accept_encoding: str | None
) -> tuple[httpx.Response, bytes]:
    """The response and its body exactly as it came off the wire (no decoding)."""
    headers = {} if accept_encoding is None else {"Accept-Encoding": accept_encoding}
    request = server.client.build_request("POST", CHAT, json=body, headers=headers)
    if accept_encoding is None:
        del request.headers["Accept-Encoding"]
    response = server.client.send(request, stream=True)
    try:
        raw = b"".join(response.iter_raw())
    finally:
        response.close()
    return response, raw


@pytest.mark.sockets
def test_a_whole_answer_to_a_request_that_accepts_gzip_is_sent_gzip_encoded(
    server: LiveServer,
) -> None:
    response, raw = raw_post(server, BODY, "gzip, deflate")
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in response.headers["vary"].lower()
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(raw)
    assert raw.startswith(GZIP_MAGIC)
    answer = json.loads(gzip.decompress(raw))
    assert answer["usage"]["completion_tokens"] == 24
    assert server.last()["content_encoding"] == "gzip"

    plain, plain_raw = raw_post(server, BODY, None)
    assert "content-encoding" not in plain.headers
    assert json.loads(plain_raw)["choices"] == answer["choices"]  # the same answer, only encoded
    assert server.last()["content_encoding"] is None


@pytest.mark.sockets
@pytest.mark.parametrize("accept_encoding", [None, "identity", "gzip;q=0", "deflate, br"])
def test_a_whole_answer_to_a_request_that_does_not_accept_gzip_is_plain(
    server: LiveServer, accept_encoding: str | None
) -> None:
    response, raw = raw_post(server, BODY, accept_encoding)
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert json.loads(raw)["object"] == "chat.completion"
    assert server.last()["content_encoding"] is None


@pytest.mark.sockets
def test_a_stream_is_never_compressed(server: LiveServer) -> None:
    response, raw = raw_post(server, {**BODY, "stream": True}, "gzip, deflate")
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in response.headers
    assert raw.startswith(b"data: ") and raw.rstrip().endswith(b"data: [DONE]")
    assert server.last()["content_encoding"] is None


@pytest.mark.sockets
@pytest.mark.parametrize("scenario", [{"status": 429}, {"error_after": 3}], ids=["429", "500"])
def test_an_error_answer_is_never_compressed(
    server: LiveServer, scenario: dict[str, object]
) -> None:
    response, raw = raw_post(server, {**BODY, "mock": scenario}, "gzip")
    assert response.status_code >= 400
    assert "content-encoding" not in response.headers
    assert json.loads(raw)["error"]["type"]
    assert server.last()["content_encoding"] is None


@pytest.mark.sockets
def test_the_sdks_read_a_gzip_answer_as_they_read_a_plain_one(
    server: LiveServer, openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic
) -> None:
    chat = openai_client.chat.completions.create(model="mock-gpt", messages=USER, seed=5)
    assert chat.usage is not None and chat.usage.completion_tokens == 24
    message = anthropic_client.messages.create(
        model="mock-claude",
        max_tokens=100,
        messages=USER,
    )
    assert message.usage.output_tokens == 24
    assert [r["content_encoding"] for r in server.records()] == ["gzip", "gzip"]
