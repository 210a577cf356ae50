"""The real engine's own books, read while a check runs: requests in progress, tokens decoded,
tokens predicted and prompt tokens, from its ``/metrics``.

The mock keeps a record per request that a check finds by its seed; an engine keeps only
counters. So a check on the engine runs alone on it (``labkit.checks.runner`` runs them one
after another, each once the engine is idle) and reads the counters before and after: the
difference is its own requests'. Names are llama.cpp's, then vLLM's (the first one exported
wins, as in ``labkit.engine``).

Two things about ``llama-server`` shape how the books are read (measured, see
docs/measurements.md, "Grading against the real engine"):

- Every read opens a new connection (``Connection: close``): llama-server drops idle
  keep-alive connections, and a reused one failed with "Server disconnected".
- A read is a task on the engine's loop, and its answer wakes every HTTP thread of the engine
  that waits for a result. A thread waiting for its prompt to be processed checks whether its
  client has gone only after a whole second without a wake-up, so reading more often than once
  a second while a client hangs up before the first token hides that hang-up from the engine.
  ``wait_idle`` reads every QUIET_EVERY_S; only ``watch`` (tokens flowing, whose own results
  wake the thread anyway) reads faster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import httpx

from labkit.engine.serve import DECODED_COUNTERS, PREDICTED_COUNTERS, RUNNING_GAUGES
from labkit.errors import EngineReadError
from labkit.scrape import exported_names, sum_first

__all__ = [
    "CACHED_PROMPT_COUNTERS",
    "PROMPT_COUNTERS",
    "QUIET_EVERY_S",
    "WATCH_EVERY_S",
    "Books",
    "EngineBooks",
    "Watch",
]

#: Prompt tokens the engine processed (llama.cpp leaves out the ones it found in its cache).
PROMPT_COUNTERS: Final = ("llamacpp:prompt_tokens_total", "vllm:prompt_tokens_total")
#: Prompt tokens llama.cpp took from its cache; with PROMPT_COUNTERS, what usage reports.
CACHED_PROMPT_COUNTERS: Final = ("llamacpp:prompt_tokens_cached_total",)
QUIET_EVERY_S: Final = 1.25  # slower than llama-server's one-second check for a gone client
WATCH_EVERY_S: Final = 0.05  # while tokens flow
READ_TIMEOUT_S: Final = 10.0  # a busy engine answers /metrics between two of its steps


@dataclass(frozen=True)
class Books:
    """The engine's counters at one moment (``at``: ``time.time()`` when the answer came)."""

    at: float
    running: int
    decoded: int
    predicted: int
    prompt_read: int  # llama.cpp counts a prompt's tokens when it has read the last of them
    prompt_cached: int  # and the ones it took from its cache as it starts

    @property
    def prompt(self) -> int:
        """Prompt tokens, cached ones included: what a usage chunk's ``prompt_tokens`` says."""
        return self.prompt_read + self.prompt_cached

    def since(self, earlier: Books) -> Books:
        """What happened between ``earlier`` and now (``running`` as it is now)."""
        return Books(
            self.at - earlier.at,
            self.running,
            self.decoded - earlier.decoded,
            self.predicted - earlier.predicted,
            self.prompt_read - earlier.prompt_read,
            self.prompt_cached - earlier.prompt_cached,
        )


class EngineBooks:
    """An engine's ``/metrics`` and ``/v1/models``, read from a check's event loop."""

    def __init__(self, url: str, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.read_timeout_s = read_timeout_s  # a check's: READ_TIMEOUT_S stretched for its run
        self._model: str | None = None

    def __repr__(self) -> str:
        return f"EngineBooks({self.url!r})"

    async def _get(self, path: str) -> httpx.Response:
        url = self.url + path
        try:
            async with httpx.AsyncClient(timeout=self.read_timeout_s) as client:
                response = await client.get(url, headers={"Connection": "close"})
        except httpx.HTTPError as failure:  # refused, reset, timed out: no books to read
            raise EngineReadError(url=url, got=f"{type(failure).__name__}: {failure}") from None
        if response.status_code != 200:
            raise EngineReadError(url=url, got=f"HTTP {response.status_code}")
        return response

    async def read(self) -> Books:
        """The counters now. Raises ``EngineReadError`` if the engine does not show them."""
        text = (await self._get("/metrics")).text
        at = time.time()

        def first(names: tuple[str, ...], *, required: bool = True) -> int:
            found = sum_first(text, names)
            if found is None and required:
                exported = ", ".join(exported_names(text)[:8]) or "nothing"
                got = f"none of {', '.join(names)}; it exports {exported}"
                raise EngineReadError(url=f"{self.url}/metrics", got=got)
            return 0 if found is None else round(found[1])

        return Books(
            at,
            first(RUNNING_GAUGES),
            first(DECODED_COUNTERS),
            first(PREDICTED_COUNTERS),
            first(PROMPT_COUNTERS),
            first(CACHED_PROMPT_COUNTERS, required=False),
        )

    async def model(self) -> str:
        """The model name the engine answers to: the first one ``/v1/models`` lists."""
        if self._model is None:
            response = await self._get("/v1/models")
            try:
                self._model = str(response.json()["data"][0]["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                got = f"{type(exc).__name__} reading {response.text[:80]!r}"
                raise EngineReadError(url=f"{self.url}/v1/models", got=got) from None
        return self._model

    async def wait_idle(self, timeout_s: float, every_s: float = QUIET_EVERY_S) -> Books | None:
        """The books once no request is running, or None if that takes over ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            books = await self.read()
            if books.running == 0:
                return books
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(every_s)

    def watch(self, every_s: float = WATCH_EVERY_S) -> Watch:
        """``async with books.watch() as watch:`` reads the books every ``every_s`` meanwhile."""
        return Watch(self, every_s)


class Watch:
    """The engine's books read at a steady pace while a check does something else."""

    def __init__(self, books: EngineBooks, every_s: float) -> None:
        self.books = books
        self.every_s = every_s
        self.samples: list[Books] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watch:
        self.samples.append(await self.books.read())
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            self.samples.append(await self.books.read())

    @property
    def last(self) -> Books:
        return self.samples[-1]

    async def until(self, holds: Callable[[Books], bool], timeout_s: float) -> Books | None:
        """The first sample from now on for which ``holds`` is true, or None after
        ``timeout_s``. Raises what reading the books raised."""
        seen = len(self.samples)
        deadline = time.monotonic() + timeout_s
        while True:
            found = next((b for b in self.samples[seen:] if holds(b)), None)
            seen = len(self.samples)
            if found is not None:
                return found
            if self._task is not None and self._task.done():
                self._task.result()  # the reader failed: raise why
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(self.every_s / 2)

    def moved(self, counter: Callable[[Books], int]) -> list[float]:
        """The times (``time.time()``) of the samples at which ``counter`` had moved."""
        pairs = zip(self.samples, self.samples[1:], strict=False)
        return [later.at for earlier, later in pairs if counter(later) != counter(earlier)]

    def generation(self) -> tuple[float, float] | None:
        """When the engine made its first and its last token, as its books showed them (within
        one sample): the first is when it had read the whole prompt (llama.cpp counts the
        prompt then, and samples the first token from that step), the last when the decoded
        count last moved. None if it decoded nothing."""
        decoded = self.moved(lambda books: books.decoded)
        if not decoded:
            return None
        read = self.moved(lambda books: books.prompt_read)
        return (read[0] if read else decoded[0]), decoded[-1]
