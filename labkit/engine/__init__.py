"""The real engine in the loop: llama.cpp's ``llama-server`` serving SmolLM2-135M on the CPU.

``recipe`` pins what it is made of and where it is cached, ``build`` gets it onto the machine
once (``make engine``), ``serve`` runs it and reads its own counters (``start_engine()``). The
mock stays the lab's default upstream for what only a mock can do (faults on demand, exact
pacing, deterministic text); the engine proves the lessons on the real thing.
"""

from __future__ import annotations

from labkit.engine.build import EngineFiles, build_engine, find_engine, missing_tools
from labkit.engine.recipe import CACHE_ENV, RECIPE, EngineRecipe, cache_root
from labkit.engine.serve import (
    DECODED_COUNTERS,
    ENGINE_URL_ENV,
    MODEL_ALIAS,
    RUNNING_GAUGES,
    EngineHandle,
    EngineServer,
    EngineSettings,
    ExternalEngine,
    engine_argv,
    engine_if_built,
    start_engine,
)

__all__ = [
    "CACHE_ENV",
    "DECODED_COUNTERS",
    "ENGINE_URL_ENV",
    "MODEL_ALIAS",
    "RECIPE",
    "RUNNING_GAUGES",
    "EngineFiles",
    "EngineHandle",
    "EngineRecipe",
    "EngineServer",
    "EngineSettings",
    "ExternalEngine",
    "build_engine",
    "cache_root",
    "engine_argv",
    "engine_if_built",
    "find_engine",
    "missing_tools",
    "start_engine",
]
