"""Read the mock upstream's request records and metrics from Python.

So a notebook can show "running: 1 → 0" and "tokens generated after you left: 2" with
numbers taken from the server that did the generating::

    mock = MockUpstream(upstream.url)
    mock.reset()
    ...                      # stream something and hang up
    mock.wait_until_idle()
    mock.last()["state"], mock.last()["tokens_after_disconnect"]

And the harness a notebook's throwaway proxies share: ``chat_request`` (the seed-tagged body),
``upstream_lifespan`` (one httpx client on the upstream, made on the app's own event loop) and
``SSE_HEADERS`` (the headers a stream is answered with, as ``proxy.py`` sends them).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import MappingProxyType
from typing import Any

import httpx

from labkit.capture import shared_ssl_context
from labkit.errors import MockUpstreamError
from labkit.scrape import exported_names, samples, sum_first
from labkit.servers import UPSTREAM_URL_ENV, ServerHandle
from labkit.settings import UPSTREAM_URL
from mock_upstream import DEBUG_TOKEN_HEADER
from mock_upstream.scenario import DEFAULT_TPS

__all__ = [
    "LAB_PROMPT",
    "SSE_HEADERS",
    "UPSTREAM_TIMEOUT",
    "MockUpstream",
    "chat_request",
    "tokens_after_hang_up",
    "upstream_lifespan",
]

LAB_PROMPT = "Explain how a streaming proxy keeps tokens flowing."
RECORD_POLL_S = 0.02
# A notebook's throwaway proxy waits up to a minute for a token, a few seconds for the rest.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=60.0, write=10.0, pool=10.0)
# What a stream is answered with, as proxy.py sends it (notebooks 02 and 03 say what each is for).
SSE_HEADERS: Mapping[str, str] = MappingProxyType(
    {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
)


def chat_request(
    seed: int,
    *,
    prompt: str = LAB_PROMPT,
    usage: bool = False,
    stream: bool = True,
    **scenario: Any,
) -> dict[str, Any]:
    """An OpenAI chat request for the mock: ``scenario`` (its pacing and faults, docs/CONTRACT.md)
    in the body's ``mock`` field, tagged with ``seed``, which fixes the answer's text and finds
    the request's record (``MockUpstream.record_of(seed)``) among concurrent ones. A proxy must
    forward the body, so the tag reaches the mock whatever the proxy does with headers.
    ``usage`` asks for the usage chunk (``stream_options.include_usage``)."""
    body: dict[str, Any] = {
        "model": "lab-model",
        "messages": [{"role": "user", "content": prompt}],
        "stream": stream,
        "mock": {**scenario, "seed": seed},
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def upstream_lifespan(
    url: str | ServerHandle, *, timeout: httpx.Timeout | float = UPSTREAM_TIMEOUT
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A lifespan for a notebook's throwaway proxy (``FastAPI(lifespan=upstream_lifespan(url))``):
    while the app is served, ``app.state.client`` is one ``httpx.AsyncClient`` on ``url`` (the
    base of every path the routes send to), with ``timeout``. It is made when the app starts, on
    the event loop of the server that runs it, and closed when the server stops."""
    base_url = url.url if isinstance(url, ServerHandle) else url

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as client:
            app.state.client = client
            yield

    return lifespan


class MockUpstream:
    """A client for a mock upstream's ``/debug/requests``, ``/debug/reset`` and ``/metrics``."""

    def __init__(
        self, url: str | ServerHandle, *, token: str | None = None, timeout_s: float = 5.0
    ) -> None:
        self.url = (url.url if isinstance(url, ServerHandle) else url).rstrip("/")
        self.timeout = httpx.Timeout(timeout_s)
        # A mock started with a debug token (the grader's) answers its debug routes only to
        # requests that carry it; learner code never sees it.
        self.headers = {DEBUG_TOKEN_HEADER: token} if token else {}
        external = (UPSTREAM_URL.read() or "").rstrip("/")
        # an error then says the cell needs the mock, not that a URL was mistyped
        self._from_env = UPSTREAM_URL_ENV if external and self.url == external else None

    def __repr__(self) -> str:
        return f"MockUpstream({self.url!r})"

    def _get(self, path: str) -> httpx.Response:
        return self._request("GET", path)

    def _request(self, method: str, path: str) -> httpx.Response:
        url = self.url + path
        try:
            response = httpx.request(
                method, url, headers=self.headers, timeout=self.timeout, verify=shared_ssl_context()
            )
        except httpx.TransportError as exc:
            raise MockUpstreamError(
                url=url,
                expected="a response",
                got=f"{type(exc).__name__}: {exc}",
                from_env=self._from_env,
            ) from None
        if not response.is_success:
            raise MockUpstreamError(
                url=url,
                expected="HTTP 200",
                got=f"HTTP {response.status_code}",
                from_env=self._from_env,
            )
        return response

    def requests(self) -> list[dict[str, Any]]:
        """Every request record, oldest first (see docs/CONTRACT.md for the fields)."""
        response = self._get("/debug/requests")
        try:
            records = response.json()
        except ValueError:
            records = None
        if not isinstance(records, list):
            raise MockUpstreamError(
                url=self.url + "/debug/requests",
                expected="a JSON list of request records",
                got=response.text[:80] or "an empty body",
                from_env=self._from_env,
            )
        return records

    def last(self) -> dict[str, Any]:
        """The most recent request record."""
        records = self.requests()
        if not records:
            raise MockUpstreamError(
                url=self.url + "/debug/requests",
                expected="at least one request record",
                got="none (send a request first, or it was cleared by reset())",
            )
        return records[-1]

    def records(self, seed: int) -> list[dict[str, Any]]:
        """The records of the requests tagged ``seed`` (their ``mock`` field's seed, as
        ``chat_request`` sets it), oldest first."""
        return [r for r in self.requests() if r.get("scenario", {}).get("seed") == seed]

    def record_now(self, seed: int) -> dict[str, Any] | None:
        """The newest record tagged ``seed`` as it is now; None before the request arrived."""
        found = self.records(seed)
        return found[-1] if found else None

    def record_of(self, seed: int, settle_s: float = 3.0) -> dict[str, Any] | None:
        """The newest record tagged ``seed`` once the mock has stopped working on it (neither
        queued for a slot nor running), or as it is after ``settle_s`` seconds: a request the
        client left is recorded ``cancelled`` a moment after the hang-up, not at once."""
        deadline = time.monotonic() + settle_s
        while True:
            record = self.record_now(seed)
            settled = record is not None and record.get("state") not in ("queued", "running")
            if settled or time.monotonic() >= deadline:
                return record
            time.sleep(RECORD_POLL_S)

    def reset(self) -> None:
        """Forget every record and zero the metrics' request counts."""
        self._request("POST", "/debug/reset")

    def running(self) -> int:
        """How many requests the mock is still generating for."""
        return sum(1 for record in self.requests() if record.get("state") == "running")

    def metrics(self) -> dict[str, float]:
        """Every Prometheus sample, keyed ``name`` or ``name{label="value",...}``.

        Counters appear under their ``_total`` names; ``_created`` timestamps are left out.
        """
        return samples(self._get("/metrics").text)

    def gauge(self, *names: str) -> float:
        """The sum of a metric over all its label sets, under the first of ``names`` the server
        exports. ``gauge("vllm:num_requests_running", "mock_requests_running")`` reads the
        requests in progress from the mock and from a real vLLM engine alike (vLLM labels each
        sample with ``model_name``; the sum counts every model). Counters work too (their
        ``_total`` sample). Raises ``MockUpstreamError`` naming what it found instead."""
        if not names:
            raise TypeError("gauge() needs at least one metric name")
        text = self._get("/metrics").text
        found = sum_first(text, names)
        if found is not None:
            return found[1]
        raise MockUpstreamError(
            url=self.url + "/metrics",
            expected=f"a metric named {' or '.join(names)}",
            got=", ".join(exported_names(text)[:12]) or "no metrics at all",
        )

    def wait_until_idle(self, timeout: float = 2.0) -> bool:
        """Wait until no request is running or queued for a slot (``slots``); True if that
        happened within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            if not any(r.get("state") in ("running", "queued") for r in self.requests()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def tokens_after_hang_up(record: Mapping[str, Any], hung_up_at: float) -> int:
    """Tokens the upstream generated after the client hung up, counted from the client's
    hang-up (not from when the upstream noticed a closed connection, which a gateway can delay):
    the mock's tokens come on a fixed clock (its first token, then one every 1/tps s), so the
    ones due by ``hung_up_at`` are known from its record (``MockUpstream.record_of``). The cancel
    checks count with it, and so does notebook 04."""
    generated = int(record.get("tokens_generated") or 0)
    first = record.get("first_token_at")
    if first is None or hung_up_at < first:
        return generated
    tps = float(record.get("scenario", {}).get("tps", DEFAULT_TPS))
    return max(0, generated - (1 + int((hung_up_at - first) * tps)))
