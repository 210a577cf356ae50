"""An incremental Server-Sent Events decoder that keeps comments.

Feed it bytes as they arrive; it returns the events and comment lines those bytes completed, so
the caller can stamp each with the arrival time of the chunk that completed it. It follows the
WHATWG event-stream rules: lines end in CRLF, LF or CR (a CR at the end of one chunk and an LF
at the start of the next are one line end), ``data`` lines join with ``\\n``, a blank line
dispatches, an event with no data is dropped, the event type defaults to ``message``, a leading
BOM is ignored, and an unfinished event at the end of the stream is discarded. Unlike most
client decoders it returns comment lines (``: keep-alive``), because heartbeats are something
the lab measures. Lines are split as bytes before decoding, so a UTF-8 character split across
chunks decodes correctly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEComment", "SSEDecoder", "SSEEvent"]

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class SSEEvent:
    event: str
    data: str
    id: str | None = None
    retry: int | None = None


@dataclass(frozen=True)
class SSEComment:
    text: str


class SSEDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False
        self._first_line = True
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None

    def decode(self, chunk: bytes) -> list[SSEEvent | SSEComment]:
        """Everything ``chunk`` completed, in stream order."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        buffer = self._buffer + chunk
        out: list[SSEEvent | SSEComment] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            line = buffer[start : match.start()]
            start = match.end()
            if match.group() == b"\r" and start == len(buffer):
                self._skip_lf = True  # a CRLF may be split across chunks
            item = self._line(line.decode("utf-8", errors="replace"))
            if item is not None:
                out.append(item)
        self._buffer = buffer[start:]
        return out

    def _line(self, line: str) -> SSEEvent | SSEComment | None:
        if self._first_line:
            self._first_line = False
            line = line.removeprefix("\ufeff")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return SSEComment(line[1:].removeprefix(" "))
        field, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._last_id,
            retry=self._retry,
        )
        self._event = ""
        self._data = []
        return event
