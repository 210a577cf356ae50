"""The chat page in a real headless Chromium, in front of the reference proxy and the mock.

Each fate of a stream ends in exactly one terminal state on the page, and only a stream that
reached its ``[DONE]`` without a refusal, a cut or an error is marked complete. The fates run on
the page as served by default, which asks for resumable streams (the reference makes them so).
Stop cancels the upstream on both pages: on one that asks for plain streams the abort of the
fetch travels the whole chain, and the mock's own record says ``cancelled``. What a resumable
stream adds, a cut resumed and Stop by the cancel endpoint, is in test_chat_resumes_in_chromium.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from browser_support import REFERENCE_PROXY, record_of, serve_with_page
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Mount, Route

from labkit import MockUpstream, capture_stream, chat_page, serve
from labkit.chat.browser import ChatBrowser, ChatTab

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"
PROMPT = "Explain how a streaming proxy keeps tokens flowing."
FAST = {"ttft_ms": 100, "tps": 50, "tokens": 20}  # 0.5 s
LONG = {"ttft_ms": 100, "tps": 20, "tokens": 400}  # 20 s: only Stop ends it in time
STOP_AFTER_CHARS = 20  # a few tokens
CANCELLED_WITHIN_S = 1.0


@pytest.fixture
def tab(browser: ChatBrowser, page_url: str) -> Iterator[ChatTab]:
    opened = browser.open(page_url)
    yield opened
    opened.close()


WATCH_COMPLETE = """() => {
  const answer = document.querySelector('[data-testid="answer"]');
  window.everComplete = false;
  new MutationObserver((records) => {
    for (const r of records) if (r.oldValue === "true") window.everComplete = true;
    if (answer.dataset.complete === "true") window.everComplete = true;
  }).observe(answer, {attributeFilter: ["data-complete"], attributeOldValue: true});
}"""


def test_a_normal_answer_ends_completed_and_shows_the_whole_text(tab: ChatTab, proxy: Any) -> None:
    scenario = {**FAST, "seed": 1701}
    tab.send(PROMPT, scenario)
    view = tab.wait_for_state()
    streamed = capture_stream(
        proxy.url + CHAT,
        json={
            "model": "lab-model",
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": True,
            "mock": scenario,
        },
    )
    assert (view.state, view.complete, view.error) == ("completed", True, "")
    assert view.answer == streamed.text and len(view.answer) > 40
    assert tab.page_errors == []


@pytest.mark.parametrize(
    ("resumable", "seed"), [(False, 1702), (True, 1708)], ids=["plain", "resumable"]
)
def test_stop_after_a_few_tokens_cancels_the_upstream_within_a_second(
    browser: ChatBrowser,
    plain_page_url: str,
    page_url: str,
    mock: MockUpstream,
    resumable: bool,
    seed: int,
) -> None:
    tab = browser.open(page_url if resumable else plain_page_url)
    tab.send(PROMPT, {**LONG, "seed": seed})
    tab.wait_for_answer(STOP_AFTER_CHARS)
    clicked = tab.stop()
    view = tab.wait_for_state()
    tab.close()
    record = record_of(mock, seed)
    assert (view.state, view.complete) == ("cancelled", False)
    assert record["state"] == "cancelled", record
    assert record["ended_at"] - clicked < CANCELLED_WITHIN_S, record
    assert record["tokens_after_disconnect"] <= 1, record
    assert record["tokens_generated"] < LONG["tokens"] // 4, record


def test_stop_cancels_the_upstream_ten_times_out_of_ten(
    browser: ChatBrowser, plain_page_url: str, mock: MockUpstream
) -> None:
    """On the page that asks for plain streams: the hang-up alone, ten times."""
    tab = browser.open(plain_page_url)
    seen = []
    for run in range(10):
        seed = 1710 + run
        tab.send(PROMPT, {**LONG, "seed": seed})
        tab.wait_for_answer(STOP_AFTER_CHARS)
        clicked = tab.stop()
        state = tab.wait_for_state().state
        record = record_of(mock, seed)
        seen.append(
            (
                state,
                record["state"],
                record["ended_at"] - clicked < CANCELLED_WITHIN_S,
                record["tokens_after_disconnect"] <= 1,
            )
        )
    tab.close()
    assert seen == [("cancelled", "cancelled", True, True)] * 10


def test_with_a_proxy_that_detaches_its_reader_stop_is_only_decorative(
    browser: ChatBrowser, upstream: Any, mock: MockUpstream
) -> None:
    """The mutation test of the two above: the page still says cancelled, the upstream goes on."""
    short = {"ttft_ms": 100, "tps": 40, "tokens": 60, "seed": 1720}  # 1.5 s
    with serve_with_page(
        REFERENCE_PROXY, upstream.url, "detached", detached=True, resumable=False
    ) as server:
        tab = browser.open(server.url + "/chat/")
        tab.send(PROMPT, short)
        tab.wait_for_answer(STOP_AFTER_CHARS)
        tab.stop()
        view = tab.wait_for_state()
        record = record_of(mock, 1720, settle_s=10.0)
        tab.close()
    assert view.state == "cancelled"
    assert record["state"] == "completed", record
    assert record["tokens_generated"] == short["tokens"], record


def test_a_dropped_upstream_ends_interrupted_with_the_error_shown(tab: ChatTab) -> None:
    tab.send(PROMPT, {**FAST, "drop_after": 5, "seed": 1703})
    view = tab.wait_for_state()
    assert (view.state, view.complete) == ("interrupted", False)
    assert "the upstream stream failed" in view.error  # the proxy's in-stream error event
    assert view.answer  # the five tokens stay on screen, shown as cut off


def test_a_refused_answer_is_never_marked_complete(tab: ChatTab) -> None:
    tab.evaluate(WATCH_COMPLETE)
    tab.send(PROMPT, {**FAST, "refusal_after": 5, "seed": 1704})
    view = tab.wait_for_state()
    assert (view.state, view.complete) == ("interrupted", False)
    assert tab.evaluate("window.everComplete") is False
    assert view.answer and "Refused" in view.error


def test_an_in_stream_error_is_shown_and_ends_interrupted(tab: ChatTab) -> None:
    tab.send(PROMPT, {**FAST, "error_after": 5, "seed": 1705})
    view = tab.wait_for_state()
    assert (view.state, view.complete) == ("interrupted", False)
    assert "mock scenario error_after=5" in view.error


def test_an_error_status_before_the_stream_ends_interrupted_with_the_status(
    tab: ChatTab,
) -> None:
    tab.send(PROMPT, {**FAST, "status": 429, "retry_after": 1, "seed": 1706})
    view = tab.wait_for_state()
    assert (view.state, view.complete, view.answer) == ("interrupted", False, "")
    assert view.error.startswith("HTTP 429: ")


def _cut_off_app() -> Starlette:
    """A server whose stream just stops after two tokens: no error event, no [DONE]."""

    async def two_tokens() -> Any:
        for text in ("Half ", "an answer"):
            yield f'data: {{"choices": [{{"index": 0, "delta": {{"content": "{text}"}}}}]}}\n\n'

    async def chat(request: Any) -> StreamingResponse:
        return StreamingResponse(two_tokens(), media_type="text/event-stream")

    return Starlette(routes=[Route(CHAT, chat, methods=["POST"]), Mount("/chat", chat_page())])


def test_a_stream_that_just_ends_is_interrupted_not_complete(browser: ChatBrowser) -> None:
    with serve(_cut_off_app(), name="cut-off") as server:
        tab = browser.open(server.url + "/chat/")
        tab.send(PROMPT, {})
        view = tab.wait_for_state()
        tab.close()
    assert (view.state, view.complete, view.answer) == ("interrupted", False, "Half an answer")
    assert "without its [DONE]" in view.error


def _header_app(seen: list[str], name: str = "accept", **page: bool) -> Starlette:
    """A server that answers one token and [DONE], and keeps each request's header ``name``."""

    async def answer() -> Any:
        yield 'data: {"choices": [{"index": 0, "delta": {"content": "ok"}}]}\n\n'
        yield "data: [DONE]\n\n"

    async def chat(request: Any) -> StreamingResponse:
        seen.append(request.headers.get(name, "(none)"))
        return StreamingResponse(answer(), media_type="text/event-stream")

    return Starlette(
        routes=[Route(CHAT, chat, methods=["POST"]), Mount("/chat", chat_page(**page))]
    )


def test_the_page_asks_for_exactly_text_event_stream(browser: ChatBrowser) -> None:
    """jupyter-server-proxy streams only for this exact Accept value (and buffers for any other,
    such as fetch's default */*): see test_chat_behind_jupyter_server_proxy.py."""
    seen: list[str] = []
    with serve(_header_app(seen), name="accept-header") as server:
        tab = browser.open(server.url + "/chat/")
        tab.send(PROMPT, {})
        view = tab.wait_for_state()
        tab.close()
    assert seen == ["text/event-stream"]
    assert (view.state, view.answer) == ("completed", "ok")


@pytest.mark.parametrize(
    ("page", "sent"),
    [({}, "true"), ({"resumable": False}, "(none)")],
    ids=["by-default", "resumable-false"],
)
def test_the_page_asks_for_a_resumable_stream_unless_told_not_to(
    browser: ChatBrowser, page: dict[str, bool], sent: str
) -> None:
    """A server that does not resume (no X-Stream-Id) answers as before either way."""
    seen: list[str] = []
    with serve(_header_app(seen, "x-resumable", **page), name="resumable-header") as server:
        tab = browser.open(server.url + "/chat/")
        tab.send(PROMPT, {})
        view = tab.wait_for_state()
        tab.close()
    assert seen == [sent]
    assert (view.state, view.answer) == ("completed", "ok")


# An SSE stream with what a parser must survive: CRLF and bare CR line ends, a comment, an
# event: line, a multi-line data field, a field without a space after its colon, and a last
# event with no blank line after it (which is not an event).
WIRE = (
    ": keep-alive\r\n\r\n"
    'data: {"a": 1}\r\n\r\n'
    "event: message\ndata: first line\ndata: second line\n\n"
    "data:no-space\r\rdata: [DONE]\n\n"
    "data: never finished"
)
EVENTS = ['{"a": 1}', "first line\nsecond line", "no-space", "[DONE]"]

PARSE = """(splits) => splits.map((pieces) => {
  const out = [];
  const push = sseParser((data) => out.push(data));
  for (const piece of pieces) push(piece);
  return out;
})"""


def test_the_sse_parser_gives_the_same_events_however_the_stream_is_cut(tab: ChatTab) -> None:
    splits = [[WIRE[:i], WIRE[i:]] for i in range(len(WIRE) + 1)]
    splits += [list(WIRE), [WIRE[i : i + 3] for i in range(0, len(WIRE), 3)]]
    results = tab.browser.call(lambda: tab.page.evaluate(PARSE, splits))
    assert all(result == EVENTS for result in results), [
        (number, result) for number, result in enumerate(results) if result != EVENTS
    ][:3]


# Event ids as the SSE spec keeps them: an id: line sets the last event id, the events after it
# without one keep it, an empty id: resets it, and an id with a NUL in it is ignored.
WIRE_WITH_IDS = (
    "id: 1\ndata: a\n\ndata: b\n\n: keep-alive\n\nid: 3\r\ndata: c\r\n\r\n"
    "id\ndata: d\n\nid: x\0y\ndata: e\n\nid: 7\ndata: half"
)
EVENTS_WITH_IDS = [["a", "1"], ["b", "1"], ["c", "3"], ["d", ""], ["e", ""]]

PARSE_WITH_IDS = """(splits) => splits.map((pieces) => {
  const out = [];
  const push = sseParser((data, id) => out.push([data, id]));
  for (const piece of pieces) push(piece);
  return out;
})"""


def test_the_sse_parser_hands_on_each_events_last_event_id(tab: ChatTab) -> None:
    splits = [[WIRE_WITH_IDS[:i], WIRE_WITH_IDS[i:]] for i in range(len(WIRE_WITH_IDS) + 1)]
    results = tab.browser.call(lambda: tab.page.evaluate(PARSE_WITH_IDS, splits))
    assert all(result == EVENTS_WITH_IDS for result in results), [
        (number, result) for number, result in enumerate(results) if result != EVENTS_WITH_IDS
    ][:3]


def test_a_broken_state_machine_is_reported_with_the_scripts_error(
    browser: ChatBrowser, upstream: Any
) -> None:
    broken = "function nextState(state, input) { return state +; }"
    with serve_with_page(REFERENCE_PROXY, upstream.url, "broken-page", machine=broken) as server:
        tab = browser.open(server.url + "/chat/")
        with pytest.raises(Exception, match="the page's script failed: SyntaxError"):
            tab.send(PROMPT, FAST)
            tab.wait_for_state(timeout_s=1.0)
        tab.close()
