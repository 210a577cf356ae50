"""Every ``LABKIT_*`` environment variable labkit reads, each named once: what a value must be,
what unset means, what it is for, and the one parse that turns its text into a value.

A variable is read when the code that needs it runs (``UPSTREAM_URL.read()``), never when a
module is imported: a notebook may set one before it starts the mock, a test monkeypatches it.
Unset and empty are the same: the default. A value that does not parse raises
:class:`~labkit.errors.SettingError`, which names the variable, what it was, what it must be and
how to get the default.

Only this module reads them. ``tests/labkit_core/test_settings.py`` keeps it so: every
``LABKIT_`` name written anywhere in ``labkit/``, ``mock_upstream/`` or ``bench/`` is one of
``SETTINGS``, no other module reads one from ``os.environ`` itself, and the table of settings in
``docs/instructors.md`` is the one ``SETTINGS`` makes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar, get_args
from urllib.parse import urlsplit

from labkit.errors import SettingError

__all__ = [
    "CHROMIUM",
    "DEFAULT_NETWORK",
    "ENGINE_CACHE",
    "ENGINE_URL",
    "NETWORK",
    "NOTEBOOK_VERDICTS",
    "SANDBOX",
    "SETTINGS",
    "UPSTREAM_URL",
    "NetworkChoice",
    "SandboxKind",
    "Setting",
    "SettingError",
]

T = TypeVar("T")
C = TypeVar("C", bound=str)

#: The sandboxes ``LABKIT_SANDBOX`` may name (``labkit.grading.isolation.KINDS``).
SandboxKind = Literal["bubblewrap", "none"]
#: The networks ``LABKIT_NETWORK`` may name (``labkit.grading.network``).
NetworkChoice = Literal["own", "shared"]
DEFAULT_NETWORK: Final[NetworkChoice] = "own"


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: ``read()`` it where it is needed."""

    name: str
    expected: str  #: what a value must be, as the docs' table and the error say it
    default: str  #: what unset (or empty) means, in words
    meaning: str  #: what it is for, in one sentence
    parse: Callable[[str], T]  #: its text to a value; raises ValueError for a bad one
    unset: Callable[[], T]  #: the value when it is unset

    def read(self) -> T:
        """The value now: the parsed variable, or the default when it is unset or empty.
        Raises ``SettingError`` when it does not parse."""
        text = os.environ.get(self.name)
        if not text:
            return self.unset()
        try:
            return self.parse(text)
        except ValueError:
            raise SettingError(
                name=self.name, value=text, expected=self.expected, default=self.default
            ) from None


def _url(text: str) -> str:
    """A server's base URL, as given; ``ExternalServer`` takes it apart."""
    parts = urlsplit(text.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(text)
    _ = parts.port  # raises ValueError for a port that is not a number
    return text


def _text(text: str) -> str:
    return text


def _nothing() -> None:
    return None


def _choice(choices: tuple[C, ...]) -> Callable[[str], C]:
    def parse(text: str) -> C:
        for choice in choices:
            if text == choice:
                return choice
        raise ValueError(text)

    return parse


def _one_of(choices: tuple[str, ...]) -> str:
    return "one of " + ", ".join(repr(choice) for choice in choices)


def _engine_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streaming-proxy-lab" / "engine"


def _url_like(example: str) -> str:
    return f"an http:// or https:// URL with a host, such as {example} (no /v1)"


_SANDBOXES: Final[tuple[SandboxKind, ...]] = get_args(SandboxKind)
_NETWORKS: Final[tuple[NetworkChoice, ...]] = get_args(NetworkChoice)

UPSTREAM_URL: Final[Setting[str | None]] = Setting(
    name="LABKIT_UPSTREAM_URL",
    expected=_url_like("http://127.0.0.1:8001"),
    default="start_mock_upstream() starts a mock upstream on a thread",
    meaning=(
        "a mock upstream (or a real OpenAI-compatible server) already running: "
        "start_mock_upstream() returns a handle on it, and stop() leaves it running"
    ),
    parse=_url,
    unset=_nothing,
)
ENGINE_URL: Final[Setting[str | None]] = Setting(
    name="LABKIT_ENGINE_URL",
    expected=_url_like("http://127.0.0.1:8000"),
    default="the lab's own engine, built once with `make engine`",
    meaning=(
        "an OpenAI-compatible engine someone else runs (vLLM, Ollama...): start_engine() and "
        "`labkit grade --engine` use it, and stop() leaves it running"
    ),
    parse=_url,
    unset=_nothing,
)
ENGINE_CACHE: Final[Setting[Path]] = Setting(
    name="LABKIT_ENGINE_CACHE",
    expected="a folder (~ is expanded)",
    default="$XDG_CACHE_HOME/streaming-proxy-lab/engine, else ~/.cache/streaming-proxy-lab/engine",
    meaning="where `make engine` keeps the engine's build and model, outside every repository",
    parse=lambda text: Path(text).expanduser(),
    unset=_engine_cache,
)
CHROMIUM: Final[Setting[str | None]] = Setting(
    name="LABKIT_CHROMIUM",
    expected="an executable Chromium or Chrome",
    default="the first of chromium, chromium-browser, google-chrome on PATH",
    meaning=(
        "the browser notebook 14 drives; a path that is not executable is reported by "
        "browser_problem() and `labkit doctor`"
    ),
    parse=_text,
    unset=_nothing,
)
SANDBOX: Final[Setting[SandboxKind | None]] = Setting(
    name="LABKIT_SANDBOX",
    expected=_one_of(_SANDBOXES),
    default="the strongest sandbox this machine allows (each report names it)",
    meaning=(
        "the sandbox learner code is graded in: 'bubblewrap' refuses to grade without it, "
        "'none' turns the sandbox off on purpose"
    ),
    parse=_choice(_SANDBOXES),
    unset=_nothing,
)
NETWORK: Final[Setting[NetworkChoice]] = Setting(
    name="LABKIT_NETWORK",
    expected=_one_of(_NETWORKS),
    default=DEFAULT_NETWORK,
    meaning=(
        "'own' grades each submission in a network namespace with only a loopback of its own "
        "(where the machine allows it), 'shared' on the machine's network, on purpose"
    ),
    parse=_choice(_NETWORKS),
    unset=lambda: DEFAULT_NETWORK,
)
NOTEBOOK_VERDICTS: Final[Setting[str | None]] = Setting(
    name="LABKIT_NOTEBOOK_VERDICTS",
    expected="a file",
    default="the verdicts are only shown",
    meaning=(
        "set by the grader's notebook runner: NotebookChecks appends each verdict to this "
        "file, as a JSON line"
    ),
    parse=_text,
    unset=_nothing,
)

#: Every setting, in the order the docs' table lists them.
SETTINGS: Final[tuple[Setting[Any], ...]] = (
    UPSTREAM_URL,
    ENGINE_URL,
    ENGINE_CACHE,
    CHROMIUM,
    SANDBOX,
    NETWORK,
    NOTEBOOK_VERDICTS,
)
