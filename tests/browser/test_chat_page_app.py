"""labkit.chat_page: the ASGI app and its HTML, without a browser."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi import FastAPI

from labkit import LabkitError, chat_page, serve
from labkit.chat import MACHINE_BEGIN, MACHINE_END, machine_source, page_html

TESTIDS = ("prompt", "scenario", "send", "stop", "state", "answer")


@pytest.mark.sockets
def test_the_page_is_served_where_it_is_mounted_with_every_testid() -> None:
    app = FastAPI()
    app.mount("/chat", chat_page())
    with serve(app, name="chat-app") as server:
        page = httpx.get(server.url + "/chat/")
        bare = httpx.get(server.url + "/chat", follow_redirects=True)
        posted = httpx.post(server.url + "/chat/", json={})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # /chat redirects to /chat/, where the page's relative ../v1/chat/completions is the proxy's
    assert bare.status_code == 200 and bare.url.path == "/chat/" and bare.text == page.text
    for testid in TESTIDS:
        assert f'data-testid="{testid}"' in page.text, testid
    assert posted.status_code == 405 and "only answers GET" in posted.text


@pytest.mark.sockets
def test_the_page_fetches_nothing_but_its_own_origin() -> None:
    html = page_html()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "EventSource(" not in html  # fetch + a reader: EventSource cannot POST or abort
    app = FastAPI()
    app.mount("/chat", chat_page())
    with serve(app, name="chat-app") as server:
        policy = httpx.get(server.url + "/chat/").headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy


def test_a_machine_replaces_the_block_between_the_markers() -> None:
    mine = "const TERMINAL = new Set();\nfunction inputOf(d) { return 'ignore'; }"
    html = page_html(mine)
    start, end = html.index(MACHINE_BEGIN), html.index(MACHINE_END)
    assert html[start:end].strip().endswith("return 'ignore'; }")
    assert "function nextState" not in html[start:end]
    assert html.replace(html[start:end], "") == page_html().replace(
        page_html()[page_html().index(MACHINE_BEGIN) : page_html().index(MACHINE_END)], ""
    )


def test_a_machine_that_would_end_the_script_is_refused_with_what_to_do() -> None:
    with pytest.raises(LabkitError, match="would end the page's script early"):
        chat_page("function nextState() {}</script><script>")
    with pytest.raises(TypeError, match="must be JavaScript source as a str, got int"):
        chat_page(3)  # type: ignore[arg-type]


def test_machine_source_is_the_block_and_serving_it_back_changes_nothing() -> None:
    source = machine_source()
    assert source.lstrip().startswith("// inputOf(data)") and "function nextState" in source
    assert page_html(machine_source()) == page_html()
