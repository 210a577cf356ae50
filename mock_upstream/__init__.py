"""A deterministic, paced, fault-injectable mock LLM server.

It speaks OpenAI Chat Completions, OpenAI Responses and Anthropic Messages well enough for
the real SDKs. Start it with ``mock-upstream --port 8001`` or build an app with
:func:`create_app`; shape each request with :class:`Scenario` keys (header
``X-Mock-Scenario: ttft_ms=50;error_after=5`` or body field ``"mock": {...}``).
"""

from mock_upstream.app import DEBUG_TOKEN_ENV, DEBUG_TOKEN_HEADER, create_app
from mock_upstream.records import RequestRecord
from mock_upstream.scenario import HEADER, Scenario, ScenarioError
from mock_upstream.tokenizer import count_tokens, tokenize

__all__ = [
    "DEBUG_TOKEN_ENV",
    "DEBUG_TOKEN_HEADER",
    "HEADER",
    "RequestRecord",
    "Scenario",
    "ScenarioError",
    "count_tokens",
    "create_app",
    "tokenize",
]
