"""Behaviour of the pinned libraries that a lesson depends on.

If one of these fails after an upgrade, the lesson that cites it is wrong: fix the lesson,
then the pin. The facts themselves are in ../shared/FACTS.md.
"""

from __future__ import annotations

import zlib

import httpx


def test_httpx_default_timeout_is_five_seconds_for_every_phase() -> None:
    # Lesson 07: a proxy built on a bare AsyncClient() kills a first token slower than 5 s.
    timeout = httpx.AsyncClient().timeout
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (5.0, 5.0, 5.0, 5.0)


def test_zlib_holds_small_writes_until_a_sync_flush() -> None:
    # Lesson 03: a gzip layer that never flushes turns a stream into one burst at the end.
    compressor = zlib.compressobj(wbits=31)
    header = compressor.compress(b'data: {"delta": "Hello"}\n\n')
    held = compressor.compress(b'data: {"delta": " world"}\n\n')
    flushed = compressor.flush(zlib.Z_SYNC_FLUSH)
    assert len(header) <= 10  # at most the gzip header: no event has left the compressor
    assert held == b""
    decoded = zlib.decompressobj(wbits=31).decompress(header + held + flushed)
    assert decoded == b'data: {"delta": "Hello"}\n\ndata: {"delta": " world"}\n\n'
