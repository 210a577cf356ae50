"""Fixtures for the browser tests: one headless Chromium, the mock upstream and the reference
proxy (``solutions/proxy.py``) with the chat page mounted (as served by default, and asking for
plain streams only), all on real sockets.

Every browser test skips, with the one-line reason, where Chromium or Playwright is missing
(``make test`` installs Debian's ``chromium`` as root; ``playwright`` is in the dev extra).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_support import REFERENCE_PROXY, serve_with_page

from labkit import MockUpstream, ThreadServer, serve
from labkit.chat.browser import ChatBrowser, browser_problem
from mock_upstream import create_app


@pytest.fixture(scope="session")
def browser() -> Iterator[ChatBrowser]:
    problem = browser_problem()
    if problem:
        pytest.skip(f"no browser: {problem}")
    with ChatBrowser() as chromium:
        yield chromium


@pytest.fixture(scope="module")  # stopped with its module: later test folders see none
def upstream() -> Iterator[ThreadServer]:
    with serve(create_app(), name="browser-mock") as server:
        yield server


@pytest.fixture
def mock(upstream: ThreadServer) -> MockUpstream:
    return MockUpstream(upstream.url)


@pytest.fixture(scope="module")
def proxy(upstream: ThreadServer) -> Iterator[ThreadServer]:
    """The reference proxy with the page as it is served by default: it asks for resumable
    streams, and the reference makes them so."""
    with serve_with_page(REFERENCE_PROXY, upstream.url, "browser-proxy") as server:
        yield server


@pytest.fixture
def page_url(proxy: ThreadServer) -> str:
    return proxy.url + "/chat/"


@pytest.fixture(scope="module")
def plain_proxy(upstream: ThreadServer) -> Iterator[ThreadServer]:
    """The reference proxy with a page that asks for plain streams (``resumable=False``): its
    Stop reaches the model only by hanging up, through every link of the chain."""
    with serve_with_page(
        REFERENCE_PROXY, upstream.url, "browser-proxy-plain", resumable=False
    ) as server:
        yield server


@pytest.fixture
def plain_page_url(plain_proxy: ThreadServer) -> str:
    return plain_proxy.url + "/chat/"
