"""The real engine that ``labkit grade --engine`` grades against: ours, or one given by URL.

Ours is ``labkit.engine``'s llama-server, started for one grading with settings chosen for the
checks (measured, docs/measurements.md, "Grading against the real engine"):

- GRADING_ENGINE: four slots (``concurrency`` runs as many streams; a fifth would wait in the
  engine's queue without response headers) of 3,072 tokens each (the longest prompt a check
  sends is 2,000 tokens), one thread (the engine's own default on a shared machine);
- prompts read PROMPT_STEP tokens per step (``--batch-size``). The engine can drop a request
  only between two steps; at its default of 2,048 a short prompt is one step, and a proxy that
  lets go of a request during its prompt would still cost that whole prompt and a first token.
  Reading 32 at a time was no slower here
  (56-79 tokens/s at 2,048, 59-74 at 32 and 64, on a loaded machine).

Started apart from ``start_engine()``'s notebook engine (its own name among the running
servers), so grading never stops or reuses one that a notebook holds.
"""

from __future__ import annotations

from typing import Final

from labkit.engine import EngineHandle, EngineServer, EngineSettings, ExternalEngine
from labkit.engine.build import require_engine
from labkit.servers._handles import bind_socket
from labkit.settings import ENGINE_URL

__all__ = [
    "GRADING_ENGINE",
    "GRADING_ENGINE_NAME",
    "PROMPT_STEP",
    "engine_at",
    "start_grading_engine",
]

PROMPT_STEP: Final = 32
GRADING_ENGINE: Final = EngineSettings(parallel=4, context=4 * 3072, batch=PROMPT_STEP)
GRADING_ENGINE_NAME: Final = "grading-engine"


def start_grading_engine() -> EngineHandle:
    """Our engine, started with GRADING_ENGINE and PROMPT_STEP; stop it with ``.stop()``.

    With ``LABKIT_ENGINE_URL`` set, that engine instead (``.stop()`` leaves it running).
    Raises ``EngineNotBuiltError`` (saying ``make engine``) where it is not built.
    """
    external = ENGINE_URL.read()
    if external:
        return ExternalEngine(external)
    files = require_engine()
    probe = bind_socket("127.0.0.1", 0, name=GRADING_ENGINE_NAME)
    port = probe.getsockname()[1]
    probe.close()  # llama-server binds for itself; the port was free a moment ago
    server = EngineServer(files, GRADING_ENGINE, port=port, name=GRADING_ENGINE_NAME)
    server.start()
    return server


def engine_at(url: str) -> EngineHandle:
    """A running engine at ``url`` (no ``/v1``). Raises ``EngineReadError`` if it does not list
    a model at ``/v1/models``."""
    return ExternalEngine(url)
