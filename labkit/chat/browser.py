"""Drive the chat page in a real, headless Chromium: the system's browser, through Playwright.

No browser is downloaded: Playwright is pointed at the Chromium the machine already has
(Debian's ``chromium`` package, or the path in ``$LABKIT_CHROMIUM``), with ``--no-sandbox``
when running as root. Playwright's sync API cannot run on a thread that has an asyncio loop
(a Jupyter kernel's main thread has one), so every call here runs on one worker thread that
this module owns; the methods block until it is done and work the same in a kernel and in
pytest::

    with ChatBrowser() as browser:
        tab = browser.open(proxy.url + "/chat/")
        tab.send(scenario={"tps": 20, "tokens": 200})
        tab.wait_for_answer(40)
        tab.stop()
        tab.wait_for_state("cancelled").state

``browser_problem()`` says in one line why no browser can run here (or returns None).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from labkit.errors import BrowserUnavailableError, ChatWaitTimeout
from labkit.settings import CHROMIUM

__all__ = [
    "CHROMIUM_ENV",
    "TERMINAL_STATES",
    "BrowserUnavailableError",
    "ChatBrowser",
    "ChatTab",
    "ChatView",
    "browser_problem",
    "find_chromium",
]

CHROMIUM_ENV: Final = CHROMIUM.name
CHROMIUM_NAMES: Final = ("chromium", "chromium-browser", "google-chrome")
TERMINAL_STATES: Final = ("completed", "interrupted", "cancelled")
DEFAULT_TIMEOUT_S: Final = 15.0
INSTALL_HINT: Final = (
    "install it (Debian/Ubuntu: apt-get install chromium; make test does it as root) "
    f"or set {CHROMIUM_ENV} to a Chromium binary"
)

T = TypeVar("T")


def find_chromium() -> str | None:
    """The Chromium to drive: ``$LABKIT_CHROMIUM``, else the first of ``chromium``,
    ``chromium-browser``, ``google-chrome`` on ``PATH``; None when there is none."""
    configured = CHROMIUM.read()
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_problem() -> str | None:
    """Why the chat page cannot be driven in a browser here, in one line; None if it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install 'playwright>=1.63,<1.64')"
    if find_chromium() is None:
        configured = CHROMIUM.read()
        if configured:
            return f"{CHROMIUM_ENV}={configured} is not an executable file: {INSTALL_HINT}"
        return f"no Chromium found on PATH: {INSTALL_HINT}"
    return None


@dataclass(frozen=True)
class ChatView:
    """What the page shows at one moment."""

    state: str
    answer: str
    complete: bool
    error: str

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


_VIEW_JS: Final = """() => {
  const el = (id) => document.querySelector(`[data-testid="${id}"]`);
  return {state: el("state").textContent, answer: el("answer").textContent,
          complete: el("answer").dataset.complete === "true", error: el("error").textContent};
}"""


def _error_line(exc: Any) -> str:
    """'SyntaxError: Unexpected token ';'' from a Playwright error thrown by the page."""
    name = getattr(exc, "name", None) or type(exc).__name__
    message = getattr(exc, "message", None) or str(exc)
    return f"{name}: {message}"


class ChatBrowser:
    """One headless Chromium, driven from a worker thread of its own. Use it as a context
    manager, or call :meth:`close`. Raises :class:`BrowserUnavailableError` when it cannot
    start, with the reason and what to do."""

    def __init__(
        self, executable: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        problem = None if executable else browser_problem()
        if problem:
            raise BrowserUnavailableError(f"Cannot drive a browser: {problem}.")
        self.executable = executable or find_chromium() or ""
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="labkit-chromium")
        self._playwright: Any = None
        self._browser: Any = None
        try:
            self.call(self._launch)
        except BaseException:
            self.close()
            raise

    def call(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the browser's thread and return its result (or raise its error)."""
        return self._pool.submit(work).result()

    def _launch(self) -> None:
        from playwright.sync_api import Error, sync_playwright

        self._playwright = sync_playwright().start()
        args = ["--no-proxy-server"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=self.executable, headless=True, args=args
            )
        except Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BrowserUnavailableError(
                f"Chromium at {self.executable} did not start: {first}. Check that it runs "
                f"('{self.executable} --headless --version'), or {INSTALL_HINT}."
            ) from None

    def open(self, url: str | None = None, *, width: int = 760, height: int = 520) -> ChatTab:
        """A new tab on the chat page at ``url`` (e.g. ``proxy.url + "/chat/"``); without a
        ``url``, an empty tab to :meth:`ChatTab.goto` later."""

        def work() -> ChatTab:
            page = self._browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(self.timeout_s * 1000)
            tab = ChatTab(self, page)
            page.on("pageerror", lambda exc: tab.page_errors.append(_error_line(exc)))
            return tab

        tab = self.call(work)
        if url is not None:
            tab.goto(url)
        return tab

    def close(self) -> None:
        """Close Chromium and the worker thread (safe to call twice)."""

        def work() -> None:
            if self._browser is not None:
                self._browser.close()
                self._browser = None
            if self._playwright is not None:
                self._playwright.stop()
                self._playwright = None

        try:
            self._pool.submit(work).result()
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> ChatBrowser:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ChatTab:
    """One tab showing the chat page; every method blocks until the browser has done it."""

    def __init__(self, browser: ChatBrowser, page: Any) -> None:
        self.browser = browser
        self.page = page
        #: Uncaught errors of the page's own script (e.g. a syntax error in a state machine).
        self.page_errors: list[str] = []

    def goto(self, url: str) -> None:
        """Load the chat page at ``url`` in this tab (quicker than opening a new tab)."""

        def work() -> None:
            self.page_errors.clear()
            self.page.goto(url)
            self.page.wait_for_selector('[data-testid="send"]')

        self.browser.call(work)

    def _testid(self, name: str) -> str:
        return f'[data-testid="{name}"]'

    def send(self, prompt: str | None = None, scenario: dict[str, Any] | None = None) -> float:
        """Fill in the prompt and the scenario (the request's ``mock`` field), press Send;
        returns the ``time.time()`` of the click."""

        def work() -> float:
            if prompt is not None:
                self.page.fill(self._testid("prompt"), prompt)
            if scenario is not None:
                self.page.fill(self._testid("scenario"), json.dumps(scenario))
            clicked = time.time()
            self.page.click(self._testid("send"))
            return clicked

        return self.browser.call(work)

    def stop(self) -> float:
        """Press Stop; returns the ``time.time()`` of the click."""

        def work() -> float:
            clicked = time.time()
            self.page.click(self._testid("stop"))
            return clicked

        return self.browser.call(work)

    def view(self) -> ChatView:
        """What the page shows now."""
        return ChatView(**self.browser.call(lambda: self.page.evaluate(_VIEW_JS)))

    def _wait(self, condition: str, argument: Any, what: str, timeout_s: float | None) -> ChatView:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        limit = self.browser.timeout_s if timeout_s is None else timeout_s
        try:
            self.browser.call(
                lambda: self.page.wait_for_function(condition, arg=argument, timeout=limit * 1000)
            )
        except PlaywrightTimeout:
            seen = self.view()
            errors = (
                f"; the page's script failed: {self.page_errors[0]}" if self.page_errors else ""
            )
            raise ChatWaitTimeout(
                f"The chat page did not reach {what} within {limit:g} s: its state is "
                f"{seen.state!r} with {len(seen.answer)} characters shown{errors}."
            ) from None
        return self.view()

    def wait_for_state(self, *states: str, timeout_s: float | None = None) -> ChatView:
        """Wait until the page's state is one of ``states`` (default: any terminal state)."""
        wanted = list(states or TERMINAL_STATES)
        return self._wait(
            "(wanted) => wanted.includes("
            "document.querySelector('[data-testid=\"state\"]').textContent)",
            wanted,
            "the state " + " or ".join(wanted),
            timeout_s,
        )

    def wait_for_answer(self, chars: int, *, timeout_s: float | None = None) -> ChatView:
        """Wait until the answer shows at least ``chars`` characters."""
        return self._wait(
            "(chars) => document.querySelector('[data-testid=\"answer\"]')"
            ".textContent.length >= chars",
            chars,
            f"{chars} characters of answer",
            timeout_s,
        )

    def evaluate(self, script: str) -> Any:
        """Run JavaScript in the page (an expression, or a function's source) and return its
        result, as Playwright's ``page.evaluate`` does."""
        return self.browser.call(lambda: self.page.evaluate(script))

    def screenshot(self) -> bytes:
        """A PNG of the tab as it is now."""
        png: bytes = self.browser.call(lambda: self.page.screenshot(type="png"))
        return png

    def close(self) -> None:
        self.browser.call(self.page.close)
