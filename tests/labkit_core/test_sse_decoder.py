"""SSEDecoder: the WHATWG event-stream examples, chunk boundaries anywhere, comments kept."""

from __future__ import annotations

import pytest

from labkit.sse import SSEComment, SSEDecoder, SSEEvent


def decode(stream: bytes, *, chunk_size: int | None = None) -> list[SSEEvent | SSEComment]:
    decoder = SSEDecoder()
    size = chunk_size or len(stream) or 1
    out: list[SSEEvent | SSEComment] = []
    for i in range(0, len(stream), size):
        out += decoder.decode(stream[i : i + size])
    return out


def test_spec_example_multi_line_data_joins_with_newlines() -> None:
    assert decode(b"data: YHOO\ndata: +2\ndata: 10\n\n") == [SSEEvent("message", "YHOO\n+2\n10")]


def test_spec_example_comments_ids_and_leading_space() -> None:
    stream = (
        b": test stream\n\ndata: first event\nid: 1\n\n"
        b"data:second event\nid\n\ndata:  third event\n\n"
    )
    assert decode(stream) == [
        SSEComment("test stream"),
        SSEEvent("message", "first event", id="1"),
        SSEEvent("message", "second event", id=""),
        SSEEvent("message", " third event", id=""),
    ]


def test_spec_example_empty_data_and_an_unfinished_last_event() -> None:
    assert decode(b"data\n\ndata\ndata\n\ndata:") == [
        SSEEvent("message", ""),
        SSEEvent("message", "\n"),
    ]


def test_spec_example_space_after_colon_is_optional() -> None:
    assert decode(b"data:test\n\ndata: test\n\n") == [SSEEvent("message", "test")] * 2


def test_event_type_applies_to_one_event_only() -> None:
    stream = b"event: message_stop\ndata: {}\n\ndata: {}\n\n"
    assert [e.event for e in decode(stream) if isinstance(e, SSEEvent)] == [
        "message_stop",
        "message",
    ]


def test_an_event_with_no_data_is_dropped() -> None:
    assert decode(b"event: ping\n\n") == []


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, None])
def test_any_line_ending_and_any_chunking_give_the_same_events(
    line_end: bytes, chunk_size: int | None
) -> None:
    lines = [b": ping", b"", b"event: delta", b"data: caf\xc3\xa9 \xe2\x98\x95", b"retry: 10", b""]
    stream = line_end.join(lines) + line_end + b"data: [DONE]" + line_end * 2
    assert decode(stream, chunk_size=chunk_size) == [
        SSEComment("ping"),
        SSEEvent("delta", "café ☕", retry=10),
        SSEEvent("message", "[DONE]", retry=10),
    ]


def test_a_crlf_split_across_chunks_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.decode(b"data: a\r") == []
    assert decoder.decode(b"\n\r") == [SSEEvent("message", "a")]
    assert decoder.decode(b"\ndata: b\n\n") == [SSEEvent("message", "b")]


def test_an_event_is_returned_by_the_chunk_that_completes_it() -> None:
    decoder = SSEDecoder()
    assert decoder.decode(b"data: one\n") == []
    assert decoder.decode(b"\n") == [SSEEvent("message", "one")]


def test_a_leading_byte_order_mark_is_ignored() -> None:
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("message", "x")]


def test_unknown_fields_and_bad_retry_values_are_ignored() -> None:
    assert decode(b"foo: bar\nretry: soon\ndata: x\n\n") == [SSEEvent("message", "x")]
