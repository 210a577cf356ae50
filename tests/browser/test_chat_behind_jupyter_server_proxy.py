"""The chat page as a learner on JupyterHub or Binder opens it: through a real Jupyter server's
jupyter-server-proxy, at ``hub_link(port)`` under the base URL a hub gives a user's server.

Two links of the chain live in that proxy. It streams a response only when the request's
``Accept`` is exactly ``text/event-stream`` (the page sends it; without it the answer arrives in
one piece at the end), and on its own it never closes its request when the browser leaves, so
Stop does not reach the model: :mod:`labkit.chat.hub`, a Jupyter server extension, closes it.
Each test here has its mutation beside it: the page without the header, the server without the
extension. The Stop tests use the page that asks for plain streams, whose Stop is the hang-up
alone; a resumable answer's Stop also POSTs its cancel endpoint, which reaches the model through
any proxy.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser_support import HUB_BASE_URL, HUB_TOKEN, JupyterServer, hub_problem, record_of

from labkit import MockUpstream, ThreadServer
from labkit.chat.browser import ChatBrowser, ChatTab
from labkit.chat.hub import hub_link

pytestmark = pytest.mark.sockets

PROMPT = "Explain how a streaming proxy keeps tokens flowing."
TWO_SECONDS = {"ttft_ms": 100, "tps": 20, "tokens": 40}
LONG = {"ttft_ms": 100, "tps": 20, "tokens": 400}  # 20 s: only Stop ends it in time
STOP_AFTER_CHARS = 20
CANCELLED_WITHIN_S = 1.0
# A stock jupyter-server-proxy is still reading the answer this long after Stop: 10 times what
# the extension takes to close it (about 0.1 s: the second chunk after the browser left).
STILL_RUNNING_AFTER_S = 2.0
STREAMED_PIECES = 10  # the 2 s answer shows at least this many times (40 tokens arrive)
STREAMED_SPREAD_S = 1.0  # ... from its first text to its last
BUFFERED_SPREAD_S = 0.1  # buffered: all the text shows within this

# Each change of the answer's text, with its time: how the answer arrived.
WATCH_ANSWER = """() => {
  const answer = document.querySelector('[data-testid="answer"]');
  window.answerLog = [];
  new MutationObserver(() => {
    window.answerLog.push([performance.now() / 1000, answer.textContent.length]);
  }).observe(answer, {childList: true, characterData: true, subtree: true});
}"""

# The page as it was before it sent Accept: fetch's default, */*.
WITHOUT_ACCEPT = """() => {
  const fetchAsSent = window.fetch;
  window.fetch = (url, init) => {
    const headers = new Headers(init.headers);
    headers.delete("accept");
    return fetchAsSent(url, {...init, headers});
  };
}"""


@pytest.fixture(scope="module", autouse=True)
def _needs_jupyter_server_proxy() -> None:
    problem = hub_problem()
    if problem:
        pytest.skip(f"no jupyter-server-proxy: {problem}")


@pytest.fixture(scope="module")
def hub() -> Iterator[JupyterServer]:
    """A Jupyter server with jupyter-server-proxy and labkit.chat.hub, as the bundle's Binder
    runs it."""
    yield from running(JupyterServer(name="hub-with-labkit", passes_hangups=True))


@pytest.fixture(scope="module")
def stock_hub() -> Iterator[JupyterServer]:
    """A Jupyter server with jupyter-server-proxy alone."""
    yield from running(JupyterServer(name="hub-stock", passes_hangups=False))


def running(server: JupyterServer) -> Iterator[JupyterServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


def open_through(browser: ChatBrowser, hub: JupyterServer, proxy: ThreadServer) -> ChatTab:
    link = hub_link(proxy.port, prefix=HUB_BASE_URL)
    assert link is not None
    return browser.open(hub.page_url(link))


def arrival(tab: ChatTab, scenario: dict[str, Any]) -> tuple[int, float, str]:
    """Send ``scenario`` and wait for the end: how many times the answer grew, the seconds from
    its first text to its last, and the final state."""
    tab.evaluate(WATCH_ANSWER)
    tab.send(PROMPT, scenario)
    view = tab.wait_for_state(timeout_s=30)
    log = [(at, length) for at, length in tab.evaluate("window.answerLog") if length > 0]
    assert log, f"no text arrived: {view}"
    pieces = len({length for _, length in log})
    return pieces, log[-1][0] - log[0][0], view.state


def test_the_hub_link_is_where_jupyter_server_proxy_serves_the_page(
    hub: JupyterServer, proxy: ThreadServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", HUB_BASE_URL)
    link = hub_link(proxy.port)
    assert link == f"{HUB_BASE_URL}proxy/{proxy.port}/chat/"
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX")
    assert hub_link(proxy.port) is None  # not behind a hub: the page is at proxy.url + /chat/
    auth = {"Authorization": f"token {HUB_TOKEN}"}
    page = httpx.get(hub.url + link, headers=auth)
    assert page.status_code == 200 and 'data-testid="stop"' in page.text
    # the page's relative ../v1/chat/completions, resolved against the link
    api = httpx.URL(hub.url + link).join("../v1/chat/completions")
    assert api.path == f"{HUB_BASE_URL}proxy/{proxy.port}/v1/chat/completions"


def test_behind_the_hub_the_answer_arrives_in_pieces_only_with_the_accept_header(
    browser: ChatBrowser, hub: JupyterServer, proxy: ThreadServer
) -> None:
    tab = open_through(browser, hub, proxy)
    streamed = arrival(tab, {**TWO_SECONDS, "seed": 2601})
    tab.evaluate(WITHOUT_ACCEPT)
    buffered = arrival(tab, {**TWO_SECONDS, "seed": 2602})
    tab.close()
    pieces, spread, state = streamed
    assert state == "completed" and pieces >= STREAMED_PIECES and spread >= STREAMED_SPREAD_S, (
        streamed
    )
    pieces, spread, state = buffered
    assert state == "completed" and spread < BUFFERED_SPREAD_S, buffered


def test_behind_the_hub_stop_cancels_the_upstream_within_a_second(
    browser: ChatBrowser, hub: JupyterServer, plain_proxy: ThreadServer, mock: MockUpstream
) -> None:
    tab = open_through(browser, hub, plain_proxy)
    tab.send(PROMPT, {**LONG, "seed": 2603})
    partial = tab.wait_for_answer(STOP_AFTER_CHARS)
    clicked = tab.stop()
    view = tab.wait_for_state()
    tab.close()
    record = record_of(mock, 2603)
    assert (partial.state, partial.complete) == ("generating", False)  # text before the end
    assert (view.state, view.complete) == ("cancelled", False)
    assert record["state"] == "cancelled", record
    assert record["ended_at"] - clicked < CANCELLED_WITHIN_S, record
    assert record["tokens_generated"] < LONG["tokens"] // 4, record


def test_behind_a_stock_jupyter_server_proxy_stop_does_not_reach_the_upstream(
    browser: ChatBrowser, stock_hub: JupyterServer, plain_proxy: ThreadServer, mock: MockUpstream
) -> None:
    """The mutation test of the one above: the page says cancelled, the model goes on."""
    tab = open_through(browser, stock_hub, plain_proxy)
    tab.send(PROMPT, {**LONG, "seed": 2604})
    partial = tab.wait_for_answer(STOP_AFTER_CHARS)
    tab.stop()
    view = tab.wait_for_state()
    at_stop = record_of(mock, 2604, settle_s=0)
    time.sleep(STILL_RUNNING_AFTER_S)
    later = record_of(mock, 2604, settle_s=0)
    tab.close()
    generated = later["tokens_generated"] - at_stop["tokens_generated"]
    assert (partial.state, view.state) == ("generating", "cancelled")
    assert later["state"] == "running", later
    # at 20 tokens a second, about 40 more: half of that is plenty to tell it from a cancel
    assert generated >= STILL_RUNNING_AFTER_S * LONG["tps"] / 2, (at_stop, later)


def test_behind_a_stock_jupyter_server_proxy_a_resumable_answer_stops_by_its_cancel(
    browser: ChatBrowser, stock_hub: JupyterServer, proxy: ThreadServer, mock: MockUpstream
) -> None:
    """The page as served by default, on the reference: Stop POSTs the answer's cancel endpoint,
    a request of its own, so the stock proxy's read to the end no longer keeps the model going."""
    tab = open_through(browser, stock_hub, proxy)
    tab.send(PROMPT, {**LONG, "seed": 2606})
    tab.wait_for_answer(STOP_AFTER_CHARS)
    resumable = bool(tab.evaluate("current.streamId"))
    clicked = tab.stop()
    view = tab.wait_for_state()
    tab.close()
    record = record_of(mock, 2606)
    assert resumable and view.state == "cancelled"
    assert record["state"] == "cancelled", record
    assert record["ended_at"] - clicked < CANCELLED_WITHIN_S, record


def test_behind_the_hub_an_error_status_reaches_the_page(
    browser: ChatBrowser, hub: JupyterServer, proxy: ThreadServer
) -> None:
    tab = open_through(browser, hub, proxy)
    tab.send(PROMPT, {**TWO_SECONDS, "status": 429, "retry_after": 1, "seed": 2605})
    view = tab.wait_for_state()
    tab.close()
    assert (view.state, view.answer) == ("interrupted", "")
    assert view.error.startswith("HTTP 429: ")
