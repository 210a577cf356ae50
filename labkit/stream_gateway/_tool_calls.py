"""Tool calls, held whole and validated before any is sent.

Structured content is never streamed in pieces: the gateway adds each tool-call delta to the
call it belongs to (:func:`hold_calls`), and after the upstream's terminal event sends the calls
only if every one is valid (:func:`checked_calls`, against the schemas the request offered,
:func:`offered_schemas`). One call that fails is a ``GatewayFailure`` with the reason
``invalid_tool_call``, and none of the answer's calls is sent.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the pinned stack

from labkit.errors import GatewayFailure as Failure  # one attempt ended without a usable answer


def hold_calls(calls: dict[int, dict[str, str]], deltas: list[dict[str, Any]]) -> None:
    """Add tool-call deltas to the calls held by index (never streamed in pieces)."""
    for delta in deltas:
        held = calls.setdefault(delta["index"], {"id": "", "name": "", "arguments": ""})
        function = delta.get("function") or {}
        held["id"] = delta.get("id") or held["id"]
        held["name"] = function.get("name") or held["name"]
        held["arguments"] += function.get("arguments") or ""


def offered_schemas(body: dict[str, Any]) -> dict[str, Any]:
    """The ``parameters`` schema of each function tool the request offers, by name."""
    schemas: dict[str, Any] = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schemas[function["name"]] = function.get("parameters") or {}
    return schemas


def checked_calls(
    calls: dict[int, dict[str, str]], finish: str | None, schemas: dict[str, Any]
) -> list[tuple[int, dict[str, str]]]:
    """The held calls in index order, once every one is validated (else ``Failure``).

    Valid means: the answer ended with ``finish`` ``tool_calls``, each call names a tool in
    ``schemas`` (:func:`offered_schemas`), and its arguments parse as JSON and satisfy that
    tool's schema. A call cut short by ``max_tokens`` can parse and still not be what the model
    meant, so the finish reason is checked before the arguments."""
    if not calls:
        return []
    if finish != "tool_calls":
        message = (
            f"the answer ended with finish_reason {finish!r}, not 'tool_calls': its tool calls "
            "may be unfinished"
        )
        raise Failure("invalid_tool_call", message)
    for index, call in sorted(calls.items()):
        _check_call(index, call, schemas)
    return sorted(calls.items())


def _check_call(index: int, call: dict[str, str], schemas: dict[str, Any]) -> None:
    """One held call: a tool the request offered, with JSON arguments that fit its schema."""
    name = call["name"]
    if name not in schemas:
        message = f"tool call {index} names {name!r}, a tool the request did not offer"
        raise Failure("invalid_tool_call", message)
    try:
        arguments = json.loads(call["arguments"])
    except ValueError:
        message = f"tool call {index} ({name}) has arguments that are not JSON"
        raise Failure("invalid_tool_call", message) from None
    try:
        jsonschema.validate(arguments, schemas[name])
    except jsonschema.ValidationError as problem:
        message = f"tool call {index} ({name}) does not fit its schema: {problem.message}"
        raise Failure("invalid_tool_call", message) from None
    except jsonschema.SchemaError as problem:
        message = f"tool {name!r} offers a schema that is not valid: {problem.message}"
        raise Failure("invalid_tool_call", message) from None
