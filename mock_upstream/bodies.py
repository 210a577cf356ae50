"""Reading request bodies: JSON, typed fields and message text, with errors that name the field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from mock_upstream.errors import ApiError, bad_request

#: Larger request bodies get a 413 (read no further than this).
MAX_BODY_BYTES = 2_000_000


def _too_large() -> ApiError:
    return ApiError(
        413,
        f"The request body is larger than {MAX_BODY_BYTES} bytes: send a shorter prompt.",
        code="request_too_large",
    )


async def _read_capped(request: Request) -> bytes:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise _too_large()
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > MAX_BODY_BYTES:
            raise _too_large()
    return bytes(raw)


async def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object, or a 400 (413 if too large) that says what was wrong."""
    raw = await _read_capped(request)
    if not raw.strip():
        raise bad_request("The request body is empty: expected a JSON object.")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(body, dict):
        raise bad_request(f"The request body must be a JSON object, got {type(body).__name__}.")
    return body


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def optional_bool(body: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{key}' must be true or false, got {_kind(value)}.", key)
    return value


def optional_int(body: Mapping[str, Any], key: str, minimum: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{key}' must be an integer, got {_kind(value)}.", key)
    if minimum is not None and value < minimum:
        raise bad_request(f"'{key}' must be at least {minimum}, got {value}.", key)
    return value


def optional_str(body: Mapping[str, Any], key: str, default: str) -> str:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad_request(f"'{key}' must be a string, got {_kind(value)}.", key)
    return value


def optional_object(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"'{key}' must be an object, got {_kind(value)}.", key)
    return value


def optional_list(body: Mapping[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(f"'{key}' must be an array, got {_kind(value)}.", key)
    return value


def required_list(body: Mapping[str, Any], key: str) -> list[Any]:
    if key not in body:
        raise bad_request(f"Missing required parameter: '{key}'.", key)
    value = optional_list(body, key)
    if not value:
        raise bad_request(f"'{key}' must be a non-empty array.", key)
    return value


def content_text(content: object, param: str) -> str:
    """Text of a message ``content``: a string, or a list of parts with ``text`` fields."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for number, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
            else:
                raise bad_request(
                    f"'{param}[{number}]' must be an object, got {_kind(part)}.",
                    f"{param}[{number}]",
                )
        return "\n".join(texts)
    raise bad_request(f"'{param}' must be a string or an array, got {_kind(content)}.", param)


def messages_text(messages: list[Any], key: str = "messages") -> str:
    """All message texts joined by newlines (every message must be an object with a role)."""
    texts = []
    for number, message in enumerate(messages):
        where = f"{key}[{number}]"
        if not isinstance(message, dict):
            raise bad_request(f"'{where}' must be an object, got {_kind(message)}.", where)
        if not isinstance(message.get("role"), str):
            raise bad_request(f"'{where}.role' is required and must be a string.", f"{where}.role")
        texts.append(content_text(message.get("content"), f"{where}.content"))
    return "\n".join(texts)
