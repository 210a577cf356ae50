"""Retries only before the first byte (notebook 11's gateway).

A gateway may send a request again only while its client has received nothing: after the
first byte a retry would glue a second, different answer onto the first. ``open_upstream``
is where that happens, once per request, before the route decides what to answer:

=====================================  ===========================================  =========
what came back                         what ``open_upstream`` does                  answered
=====================================  ===========================================  =========
a status in :data:`RETRYABLE`          try again after its ``Retry-After`` (or a    that
                                       short backoff), unless the wait is longer    status
                                       than :data:`RETRY_BUDGET_S` or it was the
                                       last of :data:`MAX_ATTEMPTS`
any other status (200 included)        return it                                    it
nothing sent: no connection            try again like a 5xx: the upstream never     502
(``ConnectError``), none in time       saw the request, so no answer can be paid    (none in
(``ConnectTimeout``), no pooled one    for twice                                    time: 504)
in time (``PoolTimeout``)
sent, no status line in time (the      no retry: the upstream may be generating     504
client's read timeout; a write one)    the answer, and the client's wait is spent
any other transport error              no retry: the request may have reached it    502
=====================================  ===========================================  =========

A failure the gateway answers itself comes back as an ``httpx.Response`` in OpenAI's error
shape (:func:`gateway_error`), so that the route passes it on as it passes on an upstream's
status: ``forward_whole`` reads it whole and logs its usage line (``error``).

``Retry-After`` has two forms (RFC 9110, section 10.2.3): a number of seconds, or an
HTTP-date. :func:`retry_after_s` reads both; ``float()`` reads only the first, and raised on
the second in the gateway's first version (its client got a 500).

``gateway_error``, ``retry_after_s`` and ``open_upstream`` are notebook 11's build-it, the same
code; ``tests/solutions/test_retries.py`` keeps them so.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx

CHAT: Final = "/v1/chat/completions"
RETRYABLE: Final = {429, 500, 502, 503, 529}
MAX_ATTEMPTS: Final = 3
RETRY_BUDGET_S: Final = 1.0  # longer Retry-After: pass the status on instead of waiting


def gateway_error(status: int, exc: Exception) -> httpx.Response:
    """The gateway's own answer when the upstream gave none: ``status`` with a body in OpenAI's
    error shape that names the failure, as a response the route passes on like an upstream's."""
    message = f"the gateway got no answer from the upstream: {type(exc).__name__}"
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": None}}
    return httpx.Response(status, json=body)


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds, or None when it is missing or
    unreadable. Two forms (RFC 9110, section 10.2.3): delay-seconds (digits only: ``"7"`` is
    7.0) or an HTTP-date (``"Wed, 02 Dec 2026 10:00:07 GMT"``: its distance from ``now``, the
    current time if not given; a date already past is 0.0). Every HTTP-date is in GMT, also
    the obsolete asctime form that names no zone."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())


async def open_upstream(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[httpx.Response, int]:
    """Send the request; return (response, attempts). Retries happen only here, before the
    first byte (the module's docstring has the table)."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        last = attempt == MAX_ATTEMPTS
        try:
            response = await client.send(client.build_request("POST", CHAT, json=body), stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Nothing was sent: the upstream never saw the request, so trying again is safe.
            if last:
                status = 504 if isinstance(exc, httpx.TimeoutException) else 502
                return gateway_error(status, exc), attempt
            await asyncio.sleep(0.05 * attempt)
            continue
        except httpx.TimeoutException as exc:  # sent: the upstream may be generating the answer
            return gateway_error(504, exc), attempt
        except httpx.HTTPError as exc:  # the request may have reached the upstream: no retry
            return gateway_error(502, exc), attempt
        wait = retry_after_s(response.headers.get("retry-after"))
        wait = 0.05 * attempt if wait is None else wait
        if response.status_code not in RETRYABLE or last or wait > RETRY_BUDGET_S:
            return response, attempt
        await response.aclose()
        await asyncio.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns what it got")
