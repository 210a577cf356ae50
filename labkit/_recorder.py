"""Turn timestamped raw chunks into a :class:`~labkit.capture.Capture`: decode, frame, interpret.

Every chunk is stamped before anything here parses it, so parsing cannot skew the times.
"""

from __future__ import annotations

import json as jsonlib
import time
import zlib
from typing import Any

import httpx

from labkit._capture_model import Capture, Chunk, Comment, Event
from labkit._decompress import Decompressor
from labkit.sse import SSEComment, SSEDecoder
from labkit.wire import interpret_body, interpret_event
from mock_upstream.tokenizer import count_tokens

__all__ = ["Recorder"]


class Recorder:
    """Builds a Capture from timestamped raw chunks."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.t0 = 0.0
        self._decoder = SSEDecoder()
        self._decompressor = Decompressor("")
        self._body = bytearray()
        self._sse = True
        self._usage: dict[str, Any] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def start(self) -> None:
        self.capture.started_at = time.time()
        self.t0 = time.perf_counter()

    def on_response(self, response: httpx.Response) -> None:
        cap = self.capture
        cap.headers_at = self.now()
        cap.status = response.status_code
        cap.headers = {key: response.headers[key] for key in response.headers}  # repeats joined
        self._decompressor = Decompressor(response.headers.get("content-encoding", ""))
        content_type = response.headers.get("content-type", "")
        self._sse = response.is_success and not content_type.startswith("application/json")

    def on_chunk(self, t: float, data: bytes) -> None:
        self.capture.chunks.append(Chunk(t, data))
        self._feed(t, self._decompressor.decode(data))

    def _feed(self, t: float, data: bytes) -> None:
        cap = self.capture
        self._body += data
        if not self._sse:
            return
        for item in self._decoder.decode(data):
            if isinstance(item, SSEComment):
                cap.comments.append(Comment(t, item.text))
                continue
            meaning = interpret_event(item.event, item.data)
            cap.events.append(
                Event(t, item.event, item.data, item.id, meaning.token, meaning.useful)
            )
            if meaning.token:
                cap.token_times.append(t)
                cap.token_counts.append(cap.tokens_received + count_tokens(meaning.text))
                cap.text += meaning.text
            if meaning.usage:
                self._usage.update(meaning.usage)
                cap.usage = dict(self._usage)
            if meaning.malformed:
                cap.malformed_events += 1
            if meaning.terminal is not None and cap.terminal == "truncated":
                cap.terminal = meaning.terminal
                if meaning.error is not None:
                    cap.error = meaning.error

    def finish(self, t: float, *, disconnected: bool = False) -> Capture:
        cap = self.capture
        try:
            tail = self._decompressor.flush()
        except zlib.error as exc:
            cap.transport_error = cap.transport_error or f"bad compressed body: {exc}"
            tail = b""
        if tail:
            self._feed(t, tail)
        cap.total_time = t
        cap.body = bytes(self._body)
        if disconnected and cap.terminal == "truncated":
            cap.terminal = "disconnected"
            cap.disconnected_at = t
        if cap.status is not None and not self._sse:
            self._finish_unary(cap)
        return cap

    def _finish_unary(self, cap: Capture) -> None:
        try:
            body: Any = jsonlib.loads(cap.body)
        except ValueError:
            body = cap.body.decode("utf-8", errors="replace")
        if cap.status is not None and cap.status >= 400:
            cap.terminal = "error"
            cap.error = body.get("error", body) if isinstance(body, dict) else body
            return
        meaning = interpret_body(body)
        cap.text = meaning.text
        cap.usage = meaning.usage
        if cap.terminal == "truncated" and cap.transport_error is None:
            cap.terminal = meaning.terminal or "done"
            cap.error = meaning.error
