"""First useful content next to TTFT: captured from the real mock over a real socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labkit import ThreadServer, capture_stream, serve
from labkit.wire import interpret_event, says_something
from mock_upstream import create_app

CHAT = "/v1/chat/completions"
# 10 filler tokens at 20 tokens/s: the first word is due at least 0.5 s after the first token
# (chunks hold at most 3 tokens), so useful content comes >= 0.35 s after TTFT on any machine.
PACE = {"ttft_ms": 50, "tps": 20, "tokens": 20, "seed": 5}


@pytest.fixture
def mock() -> Iterator[ThreadServer]:
    with serve(create_app(), name="mock-for-useful-content") as server:
        yield server


def body(**scenario: object) -> dict[str, object]:
    return {
        "model": "mock-gpt",
        "messages": [{"role": "user", "content": "Why is my line slow?"}],
        "stream": True,
        "mock": {**PACE, **scenario},
    }


@pytest.mark.sockets
def test_a_filler_opening_flatters_ttft_but_not_first_useful_content(mock: ThreadServer) -> None:
    filler = capture_stream(mock.url + CHAT, json=body(filler_tokens=10))
    assert filler.ttft is not None and filler.first_useful_content is not None
    assert filler.events[1].token and not filler.events[1].useful  # the role chunk is [0]
    assert filler.first_useful_content - filler.ttft >= 0.35
    first_useful = next(e for e in filler.events if e.useful)
    assert says_something(first_useful.json()["choices"][0]["delta"]["content"])


@pytest.mark.sockets
def test_without_filler_the_first_token_is_the_first_useful_content(mock: ThreadServer) -> None:
    plain = capture_stream(mock.url + CHAT, json=body())
    assert plain.ttft is not None
    assert plain.first_useful_content == plain.ttft


@pytest.mark.sockets
def test_thinking_counts_for_ttft_but_is_not_useful_content(mock: ThreadServer) -> None:
    request = {
        "model": "mock-claude",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Why is my line slow?"}],
        "stream": True,
        "mock": {**PACE, "thinking_tokens": 10},
    }
    capture = capture_stream(mock.url + "/v1/messages", json=request)
    assert capture.ttft is not None and capture.first_useful_content is not None
    assert capture.first_useful_content - capture.ttft >= 0.35
    assert capture.terminal == "message_stop"


@pytest.mark.parametrize(
    ("event", "data", "useful"),
    [
        ("", '{"choices":[{"delta":{"content":"\\n..."}}]}', False),
        ("", '{"choices":[{"delta":{"content":" Your"}}]}', True),
        ("", '{"choices":[{"delta":{"refusal":"I"}}]}', True),
        (
            "",
            '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}',
            True,
        ),
        (
            "content_block_delta",
            '{"type":"content_block_delta","index":0,'
            '"delta":{"type":"thinking_delta","thinking":"Hmm"}}',
            False,
        ),
        ("response.output_text.delta", '{"type":"response.output_text.delta","delta":"  "}', False),
        ("response.refusal.delta", '{"type":"response.refusal.delta","delta":"I"}', True),
        ("gateway.delta", '{"type":"gateway.delta","text":"It works."}', True),
    ],
)
def test_which_content_is_useful(event: str, data: str, useful: bool) -> None:
    meaning = interpret_event(event, data)
    assert meaning.token and meaning.useful is useful
