"""What the checks send a real engine: chat requests, prompts sized in seconds, a stream that
the check hangs up on when it chooses.

The mock takes its pace from the request (``ttft_ms``, ``tps``); an engine takes it from the
work. A slow first token is a long prompt, and how long depends on the machine, so a check that
needs one first measures how fast the engine reads a prompt now (``measure_prompt_rate``: one
short request straight to the engine) and sizes its prompt for the seconds it wants. A request
that must run a known length asks for ``max_tokens`` with ``ignore_eos`` (llama.cpp and vLLM
honour it), so a small model's early end of text cannot cut an experiment short.

Every prompt opens with a fresh nonce, so the engine's prompt cache never makes one request
faster than the last. A proxy forwards the body whole, so these fields reach the engine as the
mock's ``mock`` field reaches the mock.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from labkit.errors import EngineReadError
from labkit.sse import SSEDecoder, SSEEvent

__all__ = [
    "MAX_PROMPT_TOKENS",
    "OpenStream",
    "PromptRate",
    "engine_body",
    "measure_prompt_rate",
]

QUESTION: Final = "Tell me how a streaming proxy keeps tokens flowing."
FILLER: Final = "A proxy passes every token on as soon as the engine makes it. "
CALIBRATION_SENTENCES: Final = 12
#: The longest prompt a check sends: it fits the grading engine's slot (3,072 tokens) and
#: any engine's default context with room for the answer.
MAX_PROMPT_TOKENS: Final = 2000
TIMEOUT_S: Final = 60.0


def engine_body(
    model: str,
    *,
    max_tokens: int,
    sentences: int = 0,
    include_usage: bool = False,
    stream: bool = True,
) -> dict[str, Any]:
    """An OpenAI chat request that generates exactly ``max_tokens`` tokens after a prompt of
    ``sentences`` filler sentences, opened by a nonce the engine has never seen."""
    content = f"[{uuid.uuid4().hex}] {FILLER * sentences}{QUESTION}"
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


@dataclass(frozen=True)
class PromptRate:
    """How fast the engine reads a prompt now, and how many tokens one filler sentence is."""

    tokens_per_s: float
    tokens_per_sentence: float

    def sentences_for(self, seconds: float) -> int:
        """Filler sentences for a prompt that takes about ``seconds`` to read (at most
        MAX_PROMPT_TOKENS)."""
        tokens = min(self.tokens_per_s * seconds, MAX_PROMPT_TOKENS)
        return max(1, int(tokens / self.tokens_per_sentence))

    def seconds_for(self, sentences: int) -> float:
        return sentences * self.tokens_per_sentence / self.tokens_per_s


async def measure_prompt_rate(engine_url: str, model: str) -> PromptRate:
    """One request straight to the engine: a prompt of CALIBRATION_SENTENCES sentences and a
    single token back. Its whole time counts as reading the prompt, and the chat template's
    tokens as filler, so both figures err towards a shorter prompt than asked for."""
    body = engine_body(model, max_tokens=1, sentences=CALIBRATION_SENTENCES, stream=False)
    url = f"{engine_url.rstrip('/')}/v1/chat/completions"
    started = time.monotonic()
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.post(url, json=body)
        prompt_tokens = int(response.json()["usage"]["prompt_tokens"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise EngineReadError(url=url, got=f"{type(exc).__name__}: {exc}") from None
    elapsed = max(time.monotonic() - started, 1e-3)
    return PromptRate(prompt_tokens / elapsed, prompt_tokens / CALIBRATION_SENTENCES)


@dataclass
class OpenStream:
    """A streamed request read in the background until the check calls ``hang_up``.

    Times are ``time.time()``. ``events`` are the SSE events received (comments left out).
    """

    url: str
    body: dict[str, Any]
    sent_at: float = 0.0
    status: int | None = None
    headers_at: float | None = None
    events: list[SSEEvent] = field(default_factory=list)
    ended_at: float | None = None  # the response ended by itself (before any hang-up)
    hung_up_at: float | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> OpenStream:
        self.sent_at = time.time()
        self._task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        decoder = SSEDecoder()
        try:
            async with (
                httpx.AsyncClient(timeout=TIMEOUT_S) as client,
                client.stream("POST", self.url, json=self.body) as response,
            ):
                self.status, self.headers_at = response.status_code, time.time()
                async for chunk in response.aiter_raw():
                    self.events += [e for e in decoder.decode(chunk) if isinstance(e, SSEEvent)]
        except httpx.HTTPError:
            pass  # what arrived is what counts; a proxy that never answered sent no events
        self.ended_at = time.time()

    async def hang_up(self) -> float:
        """Close the connection now (if it is still open); return when that happened."""
        assert self._task is not None, "start() the stream first"
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self.hung_up_at = time.time()
        return self.hung_up_at

    @property
    def completion_ids(self) -> set[str]:
        """The completion ids in the chunks received."""
        ids = set()
        for event in self.events:
            try:
                chunk = json.loads(event.data)
            except ValueError:
                continue
            if isinstance(chunk, dict) and isinstance(chunk.get("id"), str):
                ids.add(chunk["id"])
        return ids
