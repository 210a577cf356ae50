"""What a capture holds: raw chunks, SSE events and comments, and the figures drawn from them.

The data model of ``labkit.capture`` (re-exported there and from ``labkit``): times are seconds
since the request was sent.
"""

from __future__ import annotations

import builtins
import itertools
import json as jsonlib
from dataclasses import dataclass, field
from typing import Any

from labkit.wire import Terminal

__all__ = ["Capture", "Chunk", "Comment", "Event"]


@dataclass(frozen=True)
class Chunk:
    """Raw bytes as read off the socket, ``t`` seconds after the request was sent."""

    t: float
    data: bytes


@dataclass(frozen=True)
class Event:
    """One SSE event, stamped with the arrival time of the chunk that completed it."""

    t: float
    event: str
    data: str
    id: str | None = None
    token: bool = False
    useful: bool = False

    def json(self) -> Any:
        """The event's data parsed as JSON (raises ``ValueError`` for ``[DONE]`` and the like)."""
        return jsonlib.loads(self.data)


@dataclass(frozen=True)
class Comment:
    """One SSE comment line (``: keep-alive``) and its arrival time."""

    t: float
    text: str


@dataclass
class Capture:
    """Everything one streamed request showed. Times are seconds since the request was sent."""

    url: str
    method: str = "POST"
    started_at: float = 0.0
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    headers_at: float | None = None
    chunks: list[Chunk] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    text: str = ""
    usage: dict[str, Any] | None = None
    terminal: Terminal = "truncated"
    error: Any = None
    transport_error: str | None = None
    malformed_events: int = 0
    total_time: float = 0.0
    disconnected_at: float | None = None
    body: builtins.bytes = b""

    @property
    def ttft(self) -> float | None:
        """Time to first token: arrival of the first content-carrying event (None if none)."""
        return self.token_times[0] if self.token_times else None

    @property
    def first_useful_content(self) -> float | None:
        """Time to the first content event a reader can use (None if none came): see
        ``labkit.capture``'s docstring. Never earlier than ``ttft``."""
        return next((e.t for e in self.events if e.useful), None)

    @property
    def gaps(self) -> list[float]:
        """Seconds between consecutive content events."""
        times = self.token_times
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def chunk_gaps(self) -> list[float]:
        """Seconds between consecutive raw chunks (any bytes, heartbeats included)."""
        times = [c.t for c in self.chunks]
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def bytes(self) -> int:
        """Bytes received on the wire (compressed, if the response was)."""
        return sum(len(c.data) for c in self.chunks)

    @property
    def content_events(self) -> int:
        """How many content events (events that carry text) arrived; one may hold many tokens."""
        return len(self.token_times)

    @property
    def tokens_received(self) -> int:
        """Tokens in the text received, by the mock's tokenizer (see the module docstring)."""
        return self.token_counts[-1] if self.token_counts else 0

    def __repr__(self) -> str:
        ttft = "-" if self.ttft is None else f"{self.ttft:.3f} s"
        return (
            f"<Capture {self.status} {self.terminal}: {self.content_events} content events "
            f"({self.tokens_received} tokens), "
            f"ttft {ttft}, total {self.total_time:.3f} s, {self.bytes} bytes>"
        )
