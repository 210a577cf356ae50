"""Read the mock upstream's request records and metrics from Python.

So a notebook can show "running: 1 → 0" and "tokens generated after you left: 2" with
numbers taken from the server that did the generating::

    mock = MockUpstream(upstream.url)
    mock.reset()
    ...                      # stream something and hang up
    mock.wait_until_idle()
    mock.last()["state"], mock.last()["tokens_after_disconnect"]
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from labkit.capture import shared_ssl_context
from labkit.errors import MockUpstreamError
from labkit.scrape import exported_names, samples, sum_first
from labkit.servers import UPSTREAM_URL_ENV, ServerHandle
from labkit.settings import UPSTREAM_URL
from mock_upstream import DEBUG_TOKEN_HEADER

__all__ = ["MockUpstream"]


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
