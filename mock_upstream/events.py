"""The API-neutral events a paced answer is made of.

:func:`mock_upstream.pacing.play` yields these at the moment each one is due; each API
module turns them into its own wire frames (streaming) or one response body (unary).
"""

from __future__ import annotations

from dataclasses import dataclass

from mock_upstream.plan import FinishReason, Part


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Opened:
    """The answer begins (sent together with the first token, after the TTFT wait)."""


@dataclass(frozen=True)
class PartStarted:
    index: int
    part: Part


@dataclass(frozen=True)
class Delta:
    """Some tokens of the current part: text, or a fragment of a tool call's arguments."""

    index: int
    part: Part
    text: str
    tokens: int


@dataclass(frozen=True)
class PartStopped:
    index: int
    part: Part


@dataclass(frozen=True)
class Finished:
    """The answer ends normally (``refusal`` included): terminal."""

    reason: FinishReason
    usage: Usage


@dataclass(frozen=True)
class Failed:
    """The provider's in-stream error: terminal."""

    usage: Usage


@dataclass(frozen=True)
class Malformed:
    """One frame that is not valid JSON; the answer goes on afterwards."""


@dataclass(frozen=True)
class Comment:
    """An SSE comment line (``comment_every_ms``): no data, every SSE client skips it."""


@dataclass(frozen=True)
class Dropped:
    """Close the connection with no terminal event: terminal."""


@dataclass(frozen=True)
class Ended:
    """End the body cleanly (a whole HTTP response, the connection left sound) with no terminal
    event: terminal. A client sees a stream that simply stops, as from a server that crashed
    between two writes behind a proxy that closed the response properly."""


Event = (
    Opened
    | PartStarted
    | Delta
    | PartStopped
    | Finished
    | Failed
    | Malformed
    | Comment
    | Dropped
    | Ended
)
TERMINAL = (Finished, Failed, Dropped, Ended)
