"""The chat page behind JupyterHub or Binder, where the browser reaches the kernel's servers only
through the Jupyter server's jupyter-server-proxy.

``hub_link(port)`` is the page's address there. jupyter-server-proxy serves
``{base_url}proxy/{port}/{path}`` and passes ``/{path}`` on to ``localhost:{port}``; on a hub the
base URL is ``$JUPYTERHUB_SERVICE_PREFIX`` (``/user/NAME/``), so the page of a proxy on port
8010 is ``/user/NAME/proxy/8010/chat/``, and its relative ``../v1/chat/completions`` goes through
the same proxy to ``/v1/chat/completions``.

jupyter-server-proxy (4.4.0 to at least 4.6.0) streams a response only when the request's
``Accept`` is exactly ``text/event-stream``, which the page sends. It then copies each chunk to
the browser as it arrives, but it never closes its own request when the browser leaves: after
Stop it goes on reading the learner's proxy to the end of the answer, writing into a closed
connection, so the proxy never sees its client leave and the model generates every token.
This module is also a Jupyter server extension that closes that request at the first chunk that
finds the browser's connection closed. Enable it where the Jupyter server runs (the bundle's
``binder/postBuild`` does, for Binder)::

    jupyter server extension enable --sys-prefix labkit.chat.hub

Nothing happens on import: the change is made when a Jupyter server loads the extension.
"""

from __future__ import annotations

import os
from typing import Any, Final

__all__ = [
    "EXTENSION",
    "HUB_PREFIX_ENV",
    "hub_link",
    "pass_hangups_on",
]

EXTENSION: Final = "labkit.chat.hub"
HUB_PREFIX_ENV: Final = "JUPYTERHUB_SERVICE_PREFIX"
_PATCHED: Final = "_labkit_passes_hangups_on"


def hub_link(port: int, prefix: str | None = None) -> str | None:
    """The chat page's address through jupyter-server-proxy, ``{prefix}proxy/{port}/chat/``;
    ``prefix`` defaults to ``$JUPYTERHUB_SERVICE_PREFIX``. None when there is no prefix (the
    kernel is not behind a hub: open ``proxy.url + "/chat/"`` directly)."""
    if prefix is None:
        prefix = os.environ.get(HUB_PREFIX_ENV, "")
    if not prefix:
        return None
    return f"{prefix.rstrip('/')}/proxy/{int(port)}/chat/"


def _browser_left(handler: Any) -> bool:
    stream = getattr(getattr(handler.request, "connection", None), "stream", None)
    return stream is None or bool(stream.closed())


def pass_hangups_on() -> str:
    """Make jupyter-server-proxy close a streamed request once its browser has left; returns
    what it did, in one line. Safe to call more than once.

    Only streamed responses change: jupyter-server-proxy builds their request with a
    ``streaming_callback`` (it writes and flushes each chunk to the browser), and that callback
    is wrapped so that, once the browser's connection is closed, it raises
    :class:`BrowserLeftError` instead of writing into it. Tornado finds the connection closed
    when a write fails, which is the second chunk after the browser left.
    """
    try:
        from jupyter_server_proxy.handlers import ProxyHandler  # type: ignore[import-untyped]
        from tornado.httputil import HTTPInputError
    except ImportError:
        return "jupyter-server-proxy is not installed: nothing to change"
    if getattr(ProxyHandler, _PATCHED, False):
        return "jupyter-server-proxy already closes a streamed request when its browser leaves"

    class BrowserLeftError(HTTPInputError):
        """The browser left a streamed response. An ``HTTPInputError`` because Tornado's HTTP
        client ends a response on one of those quietly (a line at info level: "Malformed HTTP
        message from None: the browser left ...") by closing the connection, where any other
        exception from a callback is logged as an uncaught error with its traceback."""

    original = ProxyHandler._build_proxy_request

    def build(self: Any, *args: Any, **options: Any) -> Any:
        forward = options.get("streaming_callback")
        if forward is not None:

            def streaming_callback(chunk: bytes) -> Any:
                if _browser_left(self):
                    raise BrowserLeftError(
                        f"the browser left {self.request.path}: closing the proxied request"
                    )
                return forward(chunk)

            options["streaming_callback"] = streaming_callback
        return original(self, *args, **options)

    ProxyHandler._build_proxy_request = build
    setattr(ProxyHandler, _PATCHED, True)
    return "jupyter-server-proxy now closes a streamed request when its browser leaves"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": EXTENSION}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.log.info("%s: %s", EXTENSION, pass_hangups_on())
