"""The reference reads its upstream's lines as SSE defines them: only CRLF, LF and CR end a line.

httpx's ``aiter_lines`` splits with ``str.splitlines``, which also ends a line at U+2028, U+2029,
U+0085 and five control characters. llama.cpp, like the mock, writes its JSON as UTF-8, so a
model's U+2028 arrives raw inside a ``data:`` line, and a reader split that way cuts the line in
two: the event's JSON is broken and its text lost. The mock's ``separator_tokens`` sends them;
both references (httpx and aiohttp) must pass the answer on whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import httpx
import openai
import pytest

from labkit import serve, serve_subprocess
from labkit.servers import ServerHandle
from mock_upstream import create_app
from mock_upstream.tokenizer import count_tokens
from solutions.proxy import sse_lines

UNICODE_LINE_ENDS = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e"
TOKENS = 20
SCENARIO = {"tokens": TOKENS, "separator_tokens": 7, "seed": 11, "ttft_ms": 0, "tps": 200}
REFERENCES = {"httpx": "solutions.proxy:app", "aiohttp": "solutions.aiohttp_proxy:app"}


def lines_of(chunks: Sequence[bytes]) -> list[str]:
    async def chunks_as_they_come() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def collect() -> list[str]:
        return [line async for line in sse_lines(chunks_as_they_come())]

    return asyncio.run(collect())


def test_unicode_line_ends_stay_inside_their_line() -> None:
    text = f'data: {{"c": "a{UNICODE_LINE_ENDS}b"}}\n\n'
    assert lines_of([text.encode()]) == [f'data: {{"c": "a{UNICODE_LINE_ENDS}b"}}', ""]
    assert len(text.splitlines()) > 2  # what str.splitlines, and so aiter_lines, makes of it


def test_crlf_split_between_two_chunks_ends_one_line_not_two() -> None:
    assert lines_of([b"data: 1\r", b"\n\r\n", b"data: 2\r\n\r\n"]) == ["data: 1", "", "data: 2", ""]


def test_a_lone_cr_ends_a_line_and_a_last_line_without_an_end_is_kept() -> None:
    assert lines_of([b"data: 1\r\rdata: 2\r", b"data: 3"]) == ["data: 1", "", "data: 2", "data: 3"]


def test_a_character_split_between_chunks_is_decoded_whole() -> None:
    encoded = "data: \u2028é\n".encode()
    assert lines_of([encoded[:7], encoded[7:]]) == ["data: \u2028é"]


@pytest.fixture(scope="module")
def mock() -> Iterator[ServerHandle]:
    with serve(create_app(), name="sse-lines-mock") as server:
        yield server


@pytest.mark.sockets
def test_the_mock_sends_lines_that_aiter_lines_cuts(mock: ServerHandle) -> None:
    """The experiment can fail: read with httpx's ``aiter_lines``, some lines are no SSE field."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    url = f"{mock.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body | {"mock": SCENARIO}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert any(not line.startswith("data:") for line in lines)


@pytest.mark.sockets
@pytest.mark.parametrize("reference", sorted(REFERENCES))
def test_the_reference_passes_unicode_line_ends_on_whole(
    mock: ServerHandle, reference: str, tmp_path: Path
) -> None:
    env = {"UPSTREAM_URL": mock.url, "USAGE_LOG": str(tmp_path / "usage.jsonl")}
    with serve_subprocess(REFERENCES[reference], name=f"proxy-{reference}", env=env) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="lab", max_retries=0)
        with client.chat.completions.create(
            model="lab-model",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_body={"mock": SCENARIO},
            timeout=30.0,
        ) as stream:
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "\u2028" in text and "\u2029" in text and "\x85" in text
    assert count_tokens(text) == TOKENS  # every event arrived, none cut in two
