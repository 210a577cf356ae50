"""A deterministic, paced, fault-injectable mock LLM server.

It speaks OpenAI Chat Completions, OpenAI Responses and Anthropic Messages well enough for
the real SDKs. Start it with ``mock-upstream --port 8001`` or build an app with
:func:`create_app`; shape each request with :class:`Scenario` keys (header
``X-Mock-Scenario: ttft_ms=50;error_after=5`` or body field ``"mock": {...}``).

The names load on first use (PEP 562's module ``__getattr__``), as ``labkit``'s do: importing
one submodule imports this package first, and ``labkit``'s core imports
``mock_upstream.tokenizer`` to count a capture's tokens. Loading the app here (FastAPI,
Prometheus, every wire format) cost each ``import labkit.capture`` about 0.36 s
(docs/architecture.md); ``tests/labkit_core/test_layers.py`` keeps it from coming back.
"""

import importlib
import typing

# For type checkers, which do not run __getattr__: _WHERE below, as re-exporting imports.
if typing.TYPE_CHECKING:
    from mock_upstream.app import DEBUG_TOKEN_ENV as DEBUG_TOKEN_ENV
    from mock_upstream.app import DEBUG_TOKEN_HEADER as DEBUG_TOKEN_HEADER
    from mock_upstream.app import create_app as create_app
    from mock_upstream.records import RequestRecord as RequestRecord
    from mock_upstream.scenario import HEADER as HEADER
    from mock_upstream.scenario import Scenario as Scenario
    from mock_upstream.scenario import ScenarioError as ScenarioError
    from mock_upstream.tokenizer import count_tokens as count_tokens
    from mock_upstream.tokenizer import tokenize as tokenize

# The public surface, written once: each name and the module it is loaded from.
_WHERE = {
    "DEBUG_TOKEN_ENV": "mock_upstream.app",
    "DEBUG_TOKEN_HEADER": "mock_upstream.app",
    "HEADER": "mock_upstream.scenario",
    "RequestRecord": "mock_upstream.records",
    "Scenario": "mock_upstream.scenario",
    "ScenarioError": "mock_upstream.scenario",
    "count_tokens": "mock_upstream.tokenizer",
    "create_app": "mock_upstream.app",
    "tokenize": "mock_upstream.tokenizer",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mock_upstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
