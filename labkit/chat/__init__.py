"""The browser end of the cancellation chain: a chat page to mount next to a proxy's routes.

``chat_page()`` returns a small ASGI app that serves one HTML file (``page.html`` beside this
module: plain JavaScript, no build step, nothing fetched from anywhere but its own origin)::

    app.mount("/chat", chat_page())      # then open http://127.0.0.1:PORT/chat/

The page POSTs ``../v1/chat/completions`` (the proxy's route, relative so that it also works
behind a path prefix such as JupyterHub's) with ``stream: true`` and ``Accept:
text/event-stream`` (exactly that: jupyter-server-proxy, through which a hub's browser reaches
the kernel's servers, streams only for it; :mod:`labkit.chat.hub` has the rest of the page's life
behind a hub), reads the body with ``fetch``
and a ``ReadableStream`` reader, parses SSE as it arrives and shows one of the client states
``connecting``, ``generating``, ``reconnecting``, ``completed``, ``interrupted`` or
``cancelled``. Its Stop button calls ``AbortController.abort()``. Elements carry
``data-testid`` attributes (``prompt``, ``scenario``, ``send``, ``stop``, ``state``, ``answer``,
``error``); ``answer`` has ``data-complete="true"`` only in the state ``completed``.

The page asks for a resumable stream (``X-Resumable: true``). A proxy that keeps the answer
(notebook 15) names it in ``X-Stream-Id`` and numbers its events; when the body then fails
mid-answer, the page shows ``reconnecting`` and asks ``GET ../v1/streams/{id}`` with
``Last-Event-ID`` on a new connection (``RESUME_TRIES`` tries, backing off from
``RESUME_BACKOFF_MS``), and shows only the events it had not shown. Its Stop also POSTs
``../v1/streams/{id}/cancel``, since such a proxy keeps an answer going when the connection
drops. Without ``X-Stream-Id`` the stream is a plain one, and a cut ends it ``interrupted`` as
before. ``chat_page(resumable=False)`` never asks: a proxy whose resumable parts are not
written yet may still answer ``X-Resumable`` with a stream it cannot serve.

The page's state machine (``inputOf`` and ``nextState`` in JavaScript) sits between two marker
lines: ``machine_source()`` returns it, and ``chat_page(machine=...)`` serves the page with that
block replaced (a changed machine, to see what a bug in it does). :mod:`labkit.chat.browser`
drives the page in Chromium; :class:`labkit.chat.network.FlakyNetwork` puts a network between
the two that can drop every connection, as a blip does.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from labkit.errors import ChatPageError

__all__ = [
    "MACHINE_BEGIN",
    "MACHINE_END",
    "ChatPage",
    "chat_page",
    "machine_source",
    "page_html",
]

MACHINE_BEGIN: Final = (
    "// ---- state machine: labkit.chat_page(machine=...) replaces this block ----"
)
MACHINE_END: Final = "// ---- end of the state machine ----"
#: The page's switch for resumable streams: ``page_html(resumable=False)`` sets it to false.
_RESUMABLE_MARK: Final = '<body data-resumable="true">'
# Only the page's own origin: no script, style or request goes anywhere else.
CSP: Final = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'"
)


def _template() -> str:
    return files("labkit.chat").joinpath("page.html").read_text(encoding="utf-8")


def machine_source() -> str:
    """The page's own state machine: the JavaScript between the two marker lines (without them),
    to read, or to change and pass back as ``chat_page(machine=...)``."""
    html = _template()
    block = html[html.index(MACHINE_BEGIN) + len(MACHINE_BEGIN) : html.index(MACHINE_END)]
    return block.strip("\n") + "\n"


def page_html(machine: str | None = None, *, resumable: bool = True) -> str:
    """The page's HTML, with the state machine block replaced by ``machine`` if one is given;
    ``resumable=False``: a page that never asks for a resumable stream."""
    html = _template()
    if not resumable:
        html = html.replace(_RESUMABLE_MARK, _RESUMABLE_MARK.replace("true", "false"))
    if machine is None:
        return html
    if not isinstance(machine, str):
        raise TypeError(
            f"machine must be JavaScript source as a str, got {type(machine).__name__}: "
            "return the code of inputOf and nextState as one string."
        )
    if "</script" in machine.lower():
        raise ChatPageError(
            "The state machine contains '</script', which would end the page's script early: "
            "write only the JavaScript of inputOf and nextState (and TERMINAL)."
        )
    start = html.index(MACHINE_BEGIN)
    end = html.index(MACHINE_END)
    return html[:start] + MACHINE_BEGIN + "\n" + machine.strip("\n") + "\n" + html[end:]


class ChatPage:
    """The ASGI app of :func:`chat_page`: ``GET`` anywhere under its mount serves the page."""

    def __init__(self, machine: str | None = None, *, resumable: bool = True) -> None:
        self.html = page_html(machine, resumable=resumable)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan and websockets: nothing to do
        response: Response
        if scope["method"] in ("GET", "HEAD"):
            response = HTMLResponse(
                self.html,
                headers={"Cache-Control": "no-store", "Content-Security-Policy": CSP},
            )
        else:
            response = PlainTextResponse(
                "The chat page only answers GET: it sends its questions to ../v1/chat/completions.",
                status_code=405,
                headers={"Allow": "GET, HEAD"},
            )
        await response(scope, receive, send)


def chat_page(machine: str | None = None, *, resumable: bool = True) -> ChatPage:
    """An ASGI app serving the chat page; mount it with ``app.mount("/chat", chat_page())``.

    ``machine`` replaces the page's state machine (JavaScript defining ``TERMINAL``,
    ``inputOf(data)`` and ``nextState(state, input)``); by default the page runs its own.
    ``resumable=False`` serves a page that asks for plain streams only (see the module
    docstring): for a proxy whose resumable streams are not written yet.
    """
    return ChatPage(machine, resumable=resumable)
