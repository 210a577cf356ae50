"""Errors in the providers' own shapes, and the handlers that make every failure one.

Two shapes, chosen by the route (``/v1/messages`` speaks Anthropic, the rest OpenAI)::

    OpenAI     {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
    Anthropic  {"type": "error", "error": {"type": ..., "message": ...}}

Bad input (invalid JSON, a missing field, a bad scenario) is a 400 that names the field;
an unknown route a 404; a wrong method a 405. Nothing the client sends produces a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, Final, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mock_upstream.scenario import ScenarioError

Flavour = Literal["openai", "anthropic"]


class ApiError(Exception):
    """An HTTP error answered in the provider's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        anthropic_kind: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.anthropic_kind = anthropic_kind or kind
        self.code = code
        self.headers = dict(headers or {})


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A 400 ``invalid_request_error`` naming ``param``."""
    return ApiError(400, message, param=param, code="invalid_request")


def flavour_for(path: str) -> Flavour:
    return "anthropic" if path.rstrip("/").startswith("/v1/messages") else "openai"


def error_body(flavour: Flavour, error: ApiError) -> dict[str, Any]:
    if flavour == "anthropic":
        return {"type": "error", "error": {"type": error.anthropic_kind, "message": error.message}}
    return {
        "error": {
            "message": error.message,
            "type": error.kind,
            "param": error.param,
            "code": error.code,
        }
    }


@dataclass(frozen=True)
class _StatusShape:
    kind: str
    code: str | None
    anthropic_kind: str
    message: str


_STATUS_SHAPES: Final = {
    429: _StatusShape(
        "requests", "rate_limit_exceeded", "rate_limit_error", "Rate limit reached for requests."
    ),
    500: _StatusShape(
        "server_error", None, "api_error", "The server had an error processing your request."
    ),
    503: _StatusShape(
        "server_error",
        "service_unavailable",
        "api_error",
        "The service is temporarily unavailable.",
    ),
    529: _StatusShape("server_error", "overloaded", "overloaded_error", "Overloaded"),
}


def status_error(status: int, retry_after: int | None, *, as_date: bool = False) -> ApiError:
    """The injected ``status`` scenario: a provider-shaped error before any stream, with
    ``Retry-After`` in seconds, or ``as_date``: the HTTP-date that many seconds from now."""
    shape = _STATUS_SHAPES[status]
    headers: dict[str, str] = {}
    if retry_after is not None:
        when = datetime.now(UTC) + timedelta(seconds=retry_after)
        headers["Retry-After"] = format_datetime(when, usegmt=True) if as_date else str(retry_after)
    return ApiError(
        status,
        f"{shape.message} (mock scenario status={status})",
        kind=shape.kind,
        anthropic_kind=shape.anthropic_kind,
        code=shape.code,
        headers=headers,
    )


def in_stream_error(flavour: Flavour, after: int) -> dict[str, Any]:
    """The body of the provider's mid-stream error (``error_after``)."""
    if flavour == "anthropic":
        return {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return error_body(
        "openai",
        ApiError(
            500,
            f"The server had an error while generating the response "
            f"(mock scenario error_after={after}).",
            kind="server_error",
            code="server_error",
        ),
    )


def _respond(request: Request, error: ApiError) -> JSONResponse:
    return JSONResponse(
        error_body(flavour_for(request.url.path), error),
        status_code=error.status,
        headers=error.headers,
    )


async def _on_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _respond(request, exc)


async def _on_scenario_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ScenarioError)
    return _respond(request, ApiError(400, str(exc), param=exc.param, code="invalid_scenario"))


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    message = f"{request.method} {request.url.path}: {exc.detail}"
    if exc.status_code == 404:
        message += " (routes: /v1/chat/completions, /v1/responses, /v1/messages, /v1/models)"
    error = ApiError(exc.status_code, message, kind=kind, headers=exc.headers)
    return _respond(request, error)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
    return _respond(request, bad_request(str(first.get("msg", "invalid request")), param))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    message = f"The mock upstream failed unexpectedly: {type(exc).__name__}: {exc}"
    return _respond(
        request, ApiError(500, message, kind="server_error", anthropic_kind="api_error")
    )


def install_handlers(app: FastAPI) -> None:
    """Answer every error raised by a route in the provider's shape."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(ScenarioError, _on_scenario_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(Exception, _on_unexpected)
