"""Retries only before the first byte, over real sockets: the mock's statuses (``Retry-After`` in
both of RFC 9110's forms), a port nobody listens on and an upstream that never answers; and
notebook 11's build-it the same code as ``solutions/retries.py``.

Bug: ``open_upstream`` read ``Retry-After`` with ``float()``, which raises on the HTTP-date
form: the gateway answered 500. Fix: ``retry_after_s`` reads both forms.

Bug (issue 45): a connect timeout and a pool timeout (nothing was sent either) were answered
504 at once, for a reason that holds only once the request is sent ("the upstream may be
generating"). Fix: they are retried like a connect error, and answered 504 when the attempts run
out; a read timeout, after the request was sent, is still answered 504 at once.

Bug: a connect error (nothing was sent: the safest retry there is) was neither retried nor
caught, and a timeout waiting for the status line was not caught either: the gateway answered
500 for both. Fix: a connect error is retried like a 5xx before the stream and, when the
attempts run out, answered 502 in OpenAI's error shape; a timeout is answered 504 (the
convention for an upstream that did not answer in time), at once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from labkit import MockUpstream, serve
from labkit.servers import ServerHandle
from solutions import proxy as parts
from solutions.retries import CHAT, MAX_ATTEMPTS, open_upstream, retry_after_s

NOW = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


def chat(**scenario: object) -> dict[str, Any]:
    return {
        "model": "mock-gpt",
        "messages": [{"role": "user", "content": "Is my line up?"}],
        "stream": True,
        "mock": {"ttft_ms": 5, "tps": 1000, "tokens": 8, "seed": 1, **scenario},
    }


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 120 ", 120.0),
        ("Wed, 02 Dec 2026 10:00:07 GMT", 7.0),  # IMF-fixdate, the form to send
        ("Wednesday, 02-Dec-26 10:00:30 GMT", 30.0),  # the obsolete RFC 850 form
        ("Wed Dec  2 10:01:00 2026", 60.0),  # the obsolete asctime form: no zone, GMT
        ("Wed, 02 Dec 2026 09:59:00 GMT", 0.0),  # already past: try now
        (None, None),  # no header
        ("1.5", None),  # delay-seconds are digits only
        ("-3", None),
        ("soon", None),
        ("", None),
    ],
)
def test_retry_after_is_read_in_both_forms_and_nonsense_is_no_hint(
    value: str | None, seconds: float | None
) -> None:
    assert retry_after_s(value, now=NOW) == seconds


def attempts_against(
    url: str, body: dict[str, Any], read_s: float = 5.0
) -> tuple[httpx.Response, int]:
    """``open_upstream`` with a client of its own on ``url``: (the response, read whole; the
    attempts)."""
    return asyncio.run(_attempts(url, body, read_s))


async def _attempts(url: str, body: dict[str, Any], read_s: float) -> tuple[httpx.Response, int]:
    timeout = httpx.Timeout(5.0, read=read_s)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        response, attempts = await open_upstream(client, body)
        await response.aread()
        await response.aclose()
        return response, attempts


@pytest.mark.sockets
def test_a_503_with_a_date_retry_after_is_retried(mock: ServerHandle, books: MockUpstream) -> None:
    """A date that is already here (the mock's clock, to the second) asks for no wait."""
    body = chat(status=503, retry_after=0, retry_after_date=True)
    response, attempts = attempts_against(mock.url, body)
    assert (response.status_code, attempts) == (503, MAX_ATTEMPTS)
    assert len(books.requests()) == MAX_ATTEMPTS
    assert parsedate_to_datetime(response.headers["retry-after"]).tzinfo is not None  # a date


@pytest.mark.sockets
def test_a_429_with_a_date_beyond_the_budget_is_passed_on_at_once(
    mock: ServerHandle, books: MockUpstream
) -> None:
    body = chat(status=429, retry_after=7, retry_after_date=True)
    started = time.monotonic()
    response, attempts = attempts_against(mock.url, body)
    assert (response.status_code, attempts, len(books.requests())) == (429, 1, 1)
    assert 5 < (retry_after_s(response.headers["retry-after"]) or 0) <= 7
    assert time.monotonic() - started < 1.0


@pytest.mark.sockets
def test_statuses_in_seconds_and_answers_keep_their_old_behaviour(
    mock: ServerHandle, books: MockUpstream
) -> None:
    cases = [({}, 200, 1), ({"status": 503}, 503, 3), ({"status": 429, "retry_after": 7}, 429, 1)]
    for scenario, status, tries in cases:
        books.reset()
        response, attempts = attempts_against(mock.url, chat(**scenario))
        assert (response.status_code, attempts, len(books.requests())) == (status, tries, tries)


@pytest.fixture
def closed_port() -> int:
    """A loopback port that nothing listens on: a connection to it is refused at once."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_upstream() -> Iterator[tuple[str, list[socket.socket]]]:
    """An upstream that accepts every connection and never answers: (its URL, the
    connections it accepted)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    server.close()


@pytest.mark.sockets
def test_a_refused_connection_is_retried_then_answered_502(closed_port: int) -> None:
    started = time.monotonic()
    response, attempts = attempts_against(f"http://127.0.0.1:{closed_port}", chat())
    assert (response.status_code, attempts) == (502, MAX_ATTEMPTS)
    assert time.monotonic() - started >= 0.05 + 0.10  # it waited between the attempts
    assert response.json() == {
        "error": {
            "message": "the gateway got no answer from the upstream: ConnectError",
            "type": "upstream_error",
            "param": None,
            "code": None,
        }
    }


@pytest.mark.sockets
def test_no_status_line_in_time_is_answered_504_without_a_retry(
    silent_upstream: tuple[str, list[socket.socket]],
) -> None:
    url, accepted = silent_upstream
    response, attempts = attempts_against(url, chat(), read_s=0.3)
    assert (response.status_code, attempts, len(accepted)) == (504, 1, 1)
    assert response.json()["error"]["message"].endswith(": ReadTimeout")


def gateway(upstream_url: str, read_s: float = 5.0) -> FastAPI:
    """Notebook 11's route, cut to what happens before the stream: ``open_upstream``, then the
    reference proxy's ``forward_whole`` for every status of 400 or more."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        timeout = httpx.Timeout(5.0, read=read_s)
        async with httpx.AsyncClient(base_url=upstream_url, timeout=timeout) as client:
            app.state.client = client
            yield

    app = FastAPI(lifespan=lifespan)

    @app.post(CHAT)
    async def chat_completions(request: Request) -> Response:
        response, attempts = await open_upstream(request.app.state.client, await request.json())
        assert response.status_code >= 400, "every case of these tests fails before the stream"
        answer = await parts.forward_whole(response)
        answer.headers["X-Gateway-Attempts"] = str(attempts)
        return answer

    return app


@pytest.mark.parametrize("failure", ["refused", "silent"])
@pytest.mark.sockets
def test_the_client_gets_the_status_in_openais_shape_and_one_usage_line(
    failure: str,
    closed_port: int,
    silent_upstream: tuple[str, list[socket.socket]],
    usage_log: Path,
) -> None:
    """Through a gateway, read by the openai SDK: the status, the body's error, the attempts."""
    url, read_s = {
        "refused": (f"http://127.0.0.1:{closed_port}", 5.0),
        "silent": (silent_upstream[0], 0.3),
    }[failure]
    status, attempts = {"refused": (502, "3"), "silent": (504, "1")}[failure]
    with (
        serve(gateway(url, read_s), name=f"gateway-{failure}") as server,
        openai.OpenAI(
            base_url=server.url + "/v1", api_key="lab-key", max_retries=0, timeout=5
        ) as client,
        pytest.raises(openai.APIStatusError) as raised,
    ):
        body = chat()
        client.chat.completions.create(model=body["model"], messages=body["messages"], stream=True)
    assert raised.value.status_code == status
    assert raised.value.response.headers["x-gateway-attempts"] == attempts
    assert isinstance(raised.value.body, dict) and raised.value.body["type"] == "upstream_error"
    [line] = [json.loads(text) for text in usage_log.read_text().splitlines()]
    assert line["outcome"] == "error"


def _offline(failures: list[type[httpx.TransportError]]) -> tuple[httpx.AsyncClient, list[str]]:
    """A client whose attempts raise ``failures`` in turn, then get a 200; no socket is opened.
    The list it returns collects each attempt's outcome."""
    left, seen = list(failures), []

    def handler(request: httpx.Request) -> httpx.Response:
        if left:
            failure = left.pop(0)
            seen.append(failure.__name__)
            raise failure("no answer (constructed)", request=request)
        seen.append("200")
        return httpx.Response(200, json={})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://up"), seen


async def _open_offline(failures: list[type[httpx.TransportError]]) -> tuple[int, int, list[str]]:
    client, seen = _offline(failures)
    async with client:
        response, attempts = await open_upstream(client, chat())
        await response.aclose()
    return response.status_code, attempts, seen


@pytest.mark.parametrize("failure", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout])
def test_nothing_sent_is_tried_again(failure: type[httpx.TransportError]) -> None:
    """No connection, none in time, or no pooled connection in time: the upstream never saw
    the request, so another attempt cannot make it generate (or bill) an answer twice."""
    status, attempts, seen = asyncio.run(_open_offline([failure]))
    assert (status, attempts, seen) == (200, 2, [failure.__name__, "200"])


@pytest.mark.parametrize(
    ("failure", "status"),
    [(httpx.ConnectError, 502), (httpx.ConnectTimeout, 504), (httpx.PoolTimeout, 504)],
)
def test_nothing_sent_on_every_attempt_is_the_gateways_own_status(
    failure: type[httpx.TransportError], status: int
) -> None:
    got = asyncio.run(_open_offline([failure] * MAX_ATTEMPTS))
    assert got == (status, MAX_ATTEMPTS, [failure.__name__] * MAX_ATTEMPTS)


@pytest.mark.parametrize("failure", [httpx.ReadTimeout, httpx.WriteTimeout])
def test_a_timeout_once_the_request_was_sent_is_answered_504_at_once(
    failure: type[httpx.TransportError],
) -> None:
    """The upstream may be generating the answer: a second request could pay for two."""
    assert asyncio.run(_open_offline([failure])) == (504, 1, [failure.__name__])
