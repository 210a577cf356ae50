"""The chat page's resumable streams in a real headless Chromium, in front of the reference proxy,
with a network between the two that the test drops (``labkit.chat.network.FlakyNetwork``).

A drop is not a Stop. When the connection fails mid-answer, the page resumes the answer on a new
connection from the last event it showed, and the text it ends with is the undisturbed answer's,
word for word, from one upstream request that ran to its end. Stop is: it aborts the fetch and
POSTs the cancel endpoint, and the upstream stops at once, although a hang-up alone would leave
it running for the proxy's grace period. Against a proxy that does not resume, a drop ends the
answer ``interrupted`` as it always did.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_support import REFERENCE_PROXY, record_of, records_of, serve_with_page
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Mount, Route

from labkit import MockUpstream, ThreadServer, capture_stream, chat_page, load_proxy, serve
from labkit.chat.browser import ChatBrowser
from labkit.chat.network import FlakyNetwork
from labkit.regions import strip_solutions

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"
PROMPT = "Explain how a streaming proxy keeps tokens flowing."
RUNNING = ("vllm:num_requests_running", "mock_requests_running")
# 4 s, about 780 characters: the last drop (at 260) leaves 2.5 s of answer, so a drop lands on a
# live connection even when the test sees the text late (at 2 s, a loaded run found none open).
ANSWER = {"ttft_ms": 100, "tps": 40, "tokens": 160}
AT_ONCE = {"ttft_ms": 0, "tps": 2000}
LONG = {"ttft_ms": 100, "tps": 20, "tokens": 400}  # 20 s: only Stop ends it in time
STOP_AFTER_CHARS = 20
# The page is back within this of a drop (it waits 100 ms, then asks once); the proxy keeps a
# dropped answer going for its grace period, RESUME_GRACE_S (10 s), ten times as long.
RESUMED_WITHIN_S = 1.0
# Stop cancels the upstream within this; a hang-up alone leaves it running for the grace period.
CANCELLED_WITHIN_S = 1.0
STILL_RUNNING_AFTER_S = 2.0  # the mutation: still generating this long after a Stop that hangs up
# The page gives up after four tries, 100 + 200 + 400 + 800 ms apart: 1.5 s. A page that kept
# trying through the proxy's grace period (10 s) would not be done within this.
GIVES_UP_WITHIN_S = 5.0
RESUMABLE_PARTS = ("produce", "follow", "resume_stream", "stop_stream")  # notebook 15's

# Each change of the page's state, with its time in seconds (the page's clock).
WATCH_STATES = """() => {
  const state = document.querySelector('[data-testid="state"]');
  window.states = [];
  new MutationObserver(() => window.states.push([performance.now() / 1000, state.textContent]))
    .observe(state, {childList: true, characterData: true, subtree: true});
}"""

# The page as it would be if its Stop only hung up: the cancel endpoint is never asked.
STOP_ONLY_HANGS_UP = """() => {
  const fetchAsSent = window.fetch;
  window.fetch = (url, init) => String(url).endsWith("/cancel")
    ? Promise.resolve(new Response("{}")) : fetchAsSent(url, init);
}"""


def body_of(scenario: dict[str, Any]) -> dict[str, Any]:
    """The request the page sends for ``scenario``."""
    return {
        "model": "lab-model",
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "mock": scenario,
    }


def reconnections(states: list[tuple[float, str]]) -> list[float]:
    """Seconds from each entry into ``reconnecting`` to the next state after it."""
    took = []
    for (at, state), (then, _) in pairwise(states):
        if state == "reconnecting":
            took.append(then - at)
    return took


@pytest.mark.parametrize(
    ("seed", "drop_at_chars"), [(1801, (60,)), (1802, (40, 150, 260))], ids=["once", "three-times"]
)
def test_a_dropped_connection_is_resumed_and_the_text_is_the_undisturbed_answers(
    browser: ChatBrowser,
    proxy: ThreadServer,
    upstream: ThreadServer,
    mock: MockUpstream,
    seed: int,
    drop_at_chars: tuple[int, ...],
) -> None:
    scenario = {**ANSWER, "seed": seed}
    made, cut = [], []
    with FlakyNetwork(proxy.url, name="blip") as network:
        tab = browser.open(network.url + "/chat/")
        tab.evaluate(WATCH_STATES)
        tab.send(PROMPT, scenario)
        for chars in drop_at_chars:
            tab.wait_for_answer(chars)
            made.append(network.connections_made)
            cut.append(network.drop())
        view = tab.wait_for_state()
        made.append(network.connections_made)
        states = [(at, state) for at, state in tab.evaluate("window.states")]
        errors = tab.page_errors
        tab.close()
    record_of(mock, seed)  # settled
    records = records_of(mock, seed)  # before the undisturbed copy below adds its own
    # the same answer straight from the upstream, unpaced: the pace changes when, not what
    undisturbed = capture_stream(upstream.url + CHAT, json=body_of({**scenario, **AT_ONCE})).text
    assert (view.state, view.complete, view.error, errors) == ("completed", True, "", [])
    assert view.answer == undisturbed and len(undisturbed) > drop_at_chars[-1] + 40
    assert [r["state"] for r in records] == ["completed"], records  # one request, run to its end
    assert all(cut), cut  # each drop closed the answer's connection...
    assert all(after > before for before, after in pairwise(made)), made
    took = reconnections(states)  # ... and the page came back on a new one, at once
    assert len(took) == len(drop_at_chars) and max(took) < RESUMED_WITHIN_S, states
    assert "interrupted" not in {state for _, state in states}


def test_stop_on_a_resumable_answer_cancels_the_upstream_at_once_and_logs_it_once(
    browser: ChatBrowser,
    page_url: str,
    mock: MockUpstream,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    usage = tmp_path / "usage.jsonl"
    monkeypatch.setenv("USAGE_LOG", str(usage))  # the proxy runs in this process, on a thread
    tab = browser.open(page_url)
    tab.send(PROMPT, {**LONG, "seed": 1803})
    tab.wait_for_answer(STOP_AFTER_CHARS)
    stream_id = tab.evaluate("current.streamId")
    clicked = tab.stop()
    view = tab.wait_for_state()
    tab.close()
    record = record_of(mock, 1803)
    running = mock.gauge(*RUNNING)
    deadline = time.monotonic() + CANCELLED_WITHIN_S
    while not usage.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # a second line, if there were one, would be written by now
    lines = [json.loads(line) for line in usage.read_text().splitlines()] if usage.exists() else []
    assert stream_id  # the proxy made the answer resumable
    assert (view.state, view.complete) == ("cancelled", False)
    assert record["state"] == "cancelled", record
    assert record["ended_at"] - clicked < CANCELLED_WITHIN_S, record
    assert record["tokens_after_disconnect"] <= 1, record
    assert running == 0
    assert [line["outcome"] for line in lines] == ["cancelled"], lines


def test_a_stop_that_only_hangs_up_leaves_a_resumable_answer_running(
    browser: ChatBrowser, page_url: str, proxy: ThreadServer, mock: MockUpstream
) -> None:
    """The mutation test of the one above: without its cancel, Stop is a drop, and the proxy
    keeps the answer going for someone who comes back."""
    grace_s = load_proxy(REFERENCE_PROXY).RESUME_GRACE_S
    tab = browser.open(page_url)
    tab.evaluate(STOP_ONLY_HANGS_UP)
    tab.send(PROMPT, {**LONG, "seed": 1804})
    tab.wait_for_answer(STOP_AFTER_CHARS)
    stream_id = tab.evaluate("current.streamId")
    tab.stop()
    view = tab.wait_for_state()
    at_stop = record_of(mock, 1804, settle_s=0)
    time.sleep(STILL_RUNNING_AFTER_S)
    later = record_of(mock, 1804, settle_s=0)
    tab.close()
    httpx.post(f"{proxy.url}/v1/streams/{stream_id}/cancel")  # let the mock go now
    generated = later["tokens_generated"] - at_stop["tokens_generated"]
    assert grace_s >= 10 * CANCELLED_WITHIN_S
    assert view.state == "cancelled"
    assert later["state"] == "running", later
    # at 20 tokens a second, about 40 more: half of that is plenty to tell it from a cancel
    assert generated >= STILL_RUNNING_AFTER_S * LONG["tps"] / 2, (at_stop, later)


def test_when_the_network_stays_down_the_page_gives_up_interrupted_and_the_answer_runs_on(
    browser: ChatBrowser, proxy: ThreadServer, mock: MockUpstream
) -> None:
    with FlakyNetwork(proxy.url, name="outage") as network:
        tab = browser.open(network.url + "/chat/")
        tab.send(PROMPT, {**LONG, "seed": 1805})
        tab.wait_for_answer(STOP_AFTER_CHARS)
        stream_id = tab.evaluate("current.streamId")
        network.stop()  # every connection closed, and no new one accepted
        went_down = time.time()
    view = tab.wait_for_state(timeout_s=10)
    gave_up = time.time()
    tab.close()
    record = record_of(mock, 1805, settle_s=0)
    httpx.post(f"{proxy.url}/v1/streams/{stream_id}/cancel")  # let the mock go now
    assert (view.state, view.complete) == ("interrupted", False)
    assert view.error.startswith("The connection failed: ") and "4 tries to resume" in view.error
    assert gave_up - went_down < GIVES_UP_WITHIN_S
    assert record["state"] == "running", record  # a drop is not a Stop


def _not_resumable_app(seen: list[str]) -> Starlette:
    """A server that streams an answer of 40 tokens in 2 s and knows nothing of resumable streams
    (no X-Stream-Id, no /v1/streams); it keeps each request's method and path."""

    async def tokens() -> AsyncIterator[str]:
        for number in range(40):
            yield f'data: {{"choices": [{{"index": 0, "delta": {{"content": "w{number} "}}}}]}}\n\n'
            await asyncio.sleep(0.05)
        yield "data: [DONE]\n\n"

    async def anything(request: Request) -> StreamingResponse:
        seen.append(f"{request.method} {request.url.path}")
        return StreamingResponse(tokens(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route(CHAT, anything, methods=["POST"]),
            Route("/v1/streams/{rest:path}", anything, methods=["GET", "POST"]),
            Mount("/chat", chat_page()),
        ]
    )


def test_against_a_proxy_that_does_not_resume_a_drop_ends_interrupted_as_before(
    browser: ChatBrowser,
) -> None:
    seen: list[str] = []
    with (
        serve(_not_resumable_app(seen), name="not-resumable") as server,
        FlakyNetwork(server.url, name="blip-plain") as network,
    ):
        tab = browser.open(network.url + "/chat/")
        tab.send(PROMPT, {})
        tab.wait_for_answer(STOP_AFTER_CHARS)
        network.drop()
        view = tab.wait_for_state()
        time.sleep(0.3)  # a retry, if there were one, would have reached the server by now
        tab.close()
    assert (view.state, view.complete) == ("interrupted", False)
    assert view.error.startswith("The connection failed: ") and "tries" not in view.error
    assert seen == [f"POST {CHAT}"]  # asked once: no resume, no second answer


def test_a_page_that_does_not_ask_works_with_a_proxy_whose_resumable_parts_are_not_written(
    browser: ChatBrowser, upstream: ThreadServer, mock: MockUpstream, tmp_path: Path
) -> None:
    """A learner's proxy before notebook 15: its resumable parts raise NotImplementedError. The
    page with ``resumable=False`` (notebook 14 serves that one to it) streams and stops as ever."""
    stubbed, count = strip_solutions(
        REFERENCE_PROXY.read_text(encoding="utf-8"),
        kind="code",
        notebook="15_resumable_streams",
        only=RESUMABLE_PARTS,
        importable=True,
    )
    assert count == len(RESUMABLE_PARTS)
    path = tmp_path / "proxy.py"
    path.write_text(stubbed, encoding="utf-8")
    with serve_with_page(path, upstream.url, "before-15", resumable=False) as server:
        tab = browser.open(server.url + "/chat/")
        tab.send(PROMPT, {"ttft_ms": 100, "tps": 50, "tokens": 20, "seed": 1806})
        answered = tab.wait_for_state()
        tab.send(PROMPT, {**LONG, "seed": 1807})
        tab.wait_for_answer(STOP_AFTER_CHARS)
        tab.stop()
        stopped = tab.wait_for_state()
        tab.close()
    assert (answered.state, answered.complete) == ("completed", True)
    assert stopped.state == "cancelled"
    assert record_of(mock, 1807)["state"] == "cancelled"
