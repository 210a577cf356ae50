"""What a request asks the mock to do: pacing, length and one or more injected faults.

A scenario comes from three layers, later ones winning key by key:

1. the app defaults (``create_app(defaults=...)``, or the CLI flags),
2. the header ``X-Mock-Scenario: ttft_ms=50;tps=100;error_after=5``,
3. the body field ``"mock": {"ttft_ms": 50, "error_after": 5}``.

:func:`resolve` is the one parser for both sources. A bad key or value raises
:class:`ScenarioError`, which names the source, the key, what was expected and what came.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

HEADER: Final = "X-Mock-Scenario"
BODY_FIELD: Final = "mock"

DEFAULT_TTFT_MS: Final = 200
DEFAULT_TPS: Final = 25.0
DEFAULT_TOKENS: Final = 48
DEFAULT_STALL_S: Final = 30.0
STATUSES: Final = (429, 500, 503, 529)


class ScenarioError(ValueError):
    """A scenario key or value the mock does not understand.

    ``source`` is where it came from (``X-Mock-Scenario``, ``mock`` or ``defaults``),
    ``key`` the offending key; the message says what was expected and what came instead.
    """

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source = source
        self.key = key
        super().__init__(f"{source}: {message}")

    @property
    def param(self) -> str:
        """The dotted name of the bad field, e.g. ``mock.ttft_ms``."""
        return f"{self.source}.{self.key}"


@dataclass(frozen=True)
class Scenario:
    """How the mock answers one request. See docs/CONTRACT.md for the table of keys.

    Every ``*_after`` value counts completion tokens: ``error_after=5`` sends five tokens,
    then the provider's in-stream error; ``error_after=0`` makes that error the first event
    of the 200. A fault whose position is past the end of the completion never fires.
    ``drop_after`` breaks the connection with no terminal event (the chunked body never gets its
    last chunk); ``end_after`` ends the body cleanly with no terminal event (no ``[DONE]``,
    ``response.completed`` or ``message_stop``, yet a whole HTTP response), which a client
    cannot tell from a short answer unless it requires the terminal event.

    The wire variants change how the same answer is framed, as some real servers frame it:
    ``comment_every_ms`` (SSE comments while it runs), ``usage_with_choices`` (usage on the
    last chunk with choices), ``interleave_tools`` (parallel tool-call deltas interleaved) and
    ``done_after_error`` (``data: [DONE]`` after the in-stream error, as vLLM sends it), and on
    the Responses route ``refusal_deltas`` (a refusal sent as ``response.refusal.delta`` events).
    ``retry_after_date`` sends ``retry_after`` as an HTTP-date that many seconds from now (the
    other form RFC 9110 allows) instead of as a number of seconds.

    The shape keys change what the answer holds: ``filler_tokens`` (the text opens with that
    many tokens of whitespace and ellipses, as a model that "thinks out loud" in blank space),
    ``separator_tokens`` (then that many tokens of ellipses and the Unicode line ends U+2028,
    U+2029 and U+0085, sent raw: only CR and LF end an SSE line, and a reader that splits
    more, as httpx's ``aiter_lines`` does, loses the event),
    ``preamble_tokens`` (a text part before the tool calls) and, on the Messages route,
    ``thinking_tokens`` (an extended-thinking block, with its ``signature_delta``, first).

    ``pause_on_backpressure`` changes what a slow reader does to generation. By default the
    mock goes on generating (and counting, and billing) at its pace while the client's socket
    is full, as llama.cpp and vLLM do; with ``pause_on_backpressure=True`` generation waits
    whenever the socket does, which no engine we measured does (see
    :mod:`mock_upstream.generation`). Unary answers are not affected.

    ``slots`` makes the mock an engine with that many slots (:mod:`mock_upstream.slots`):
    requests with the same ``slots`` value share N slots, and one beyond them waits, first come
    first served and with no response headers yet, until a slot frees; its clock (``ttft_ms``)
    starts when it gets one. ``None`` (the default) never waits.
    """

    ttft_ms: int = DEFAULT_TTFT_MS
    tps: float = DEFAULT_TPS
    seed: int | None = None
    tokens: int = DEFAULT_TOKENS
    error_after: int | None = None
    drop_after: int | None = None
    end_after: int | None = None
    stall_after: int | None = None
    stall_s: float = DEFAULT_STALL_S
    status: int | None = None
    retry_after: int | None = None
    retry_after_date: bool = False
    malformed_after: int | None = None
    refusal_after: int | None = None
    comment_every_ms: int | None = None
    usage_with_choices: bool = False
    interleave_tools: bool = False
    done_after_error: bool = False
    refusal_deltas: bool = False
    filler_tokens: int = 0
    separator_tokens: int = 0
    preamble_tokens: int = 0
    thinking_tokens: int = 0
    pause_on_backpressure: bool = False
    slots: int | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in _OPTIONAL:
                continue
            object.__setattr__(self, field.name, _check(field.name, value, "Scenario"))

    def merged(self, overrides: Mapping[str, object]) -> Scenario:
        """A copy with ``overrides`` (values already checked by :func:`convert`) applied."""
        if not overrides:
            return self
        return dataclasses.replace(self, **overrides)  # type: ignore[arg-type]

    def changed(self) -> dict[str, object]:
        """The keys that differ from the built-in defaults (for request records)."""
        base = Scenario()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(base, f.name)
        }


def _int(minimum: int) -> Callable[[object], int]:
    def convert(value: object) -> int:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            value = int(value.strip())
        if not isinstance(value, int):
            raise TypeError
        if value < minimum:
            raise ValueError
        return value

    convert.__doc__ = f"an integer >= {minimum}"
    return convert


def _float(minimum: float, *, strict: bool) -> Callable[[object], float]:
    def convert(value: object) -> float:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str):
            value = float(value.strip())
        if not isinstance(value, int | float):
            raise TypeError
        number = float(value)
        if not math.isfinite(number) or number < minimum or (strict and number == minimum):
            raise ValueError
        return number

    convert.__doc__ = f"a number {'>' if strict else '>='} {minimum:g}"
    return convert


def _status(value: object) -> int:
    number = _int(0)(value)
    if number not in STATUSES:
        raise ValueError
    return number


_status.__doc__ = "one of " + ", ".join(str(s) for s in STATUSES)

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def flag(value: object) -> bool:  # a scenario key's, and the mock's ?stream= query parameter
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError


flag.__doc__ = "true or false (1 or 0)"

_ANY_INT = _int(-(2**63))
_ANY_INT.__doc__ = "an integer"

_CONVERTERS: Final[dict[str, Callable[[object], Any]]] = {
    "ttft_ms": _int(0),
    "tps": _float(0.0, strict=True),
    "seed": _ANY_INT,
    "tokens": _int(1),
    "error_after": _int(0),
    "drop_after": _int(0),
    "end_after": _int(0),
    "stall_after": _int(0),
    "stall_s": _float(0.0, strict=False),
    "status": _status,
    "retry_after": _int(0),
    "retry_after_date": flag,
    "malformed_after": _int(0),
    "refusal_after": _int(0),
    "comment_every_ms": _int(1),
    "usage_with_choices": flag,
    "interleave_tools": flag,
    "done_after_error": flag,
    "refusal_deltas": flag,
    "filler_tokens": _int(0),
    "separator_tokens": _int(0),
    "preamble_tokens": _int(0),
    "thinking_tokens": _int(0),
    "pause_on_backpressure": flag,
    "slots": _int(1),
}
_OPTIONAL: Final = frozenset(f.name for f in dataclasses.fields(Scenario) if f.default is None)
KEYS: Final = tuple(_CONVERTERS)
#: Keys that only one API has, and that API's name: sent to another route they are a 400.
ONLY_ON: Final[dict[str, str]] = {
    "usage_with_choices": "chat",
    "interleave_tools": "chat",
    "done_after_error": "chat",
    "refusal_deltas": "responses",
    "thinking_tokens": "messages",
}
#: Keys that change how an answer is framed on the wire, not what it says, and the keys that
#: only one API has (``thinking_tokens``): the ones :func:`mock_upstream.exchange.check_variants`
#: looks at.
WIRE_VARIANTS: Final = frozenset({"comment_every_ms", *ONLY_ON})


def _check(key: str, value: object, source: str) -> Any:
    converter = _CONVERTERS[key]
    try:
        converted = converter(value)
    except (TypeError, ValueError, OverflowError):
        raise ScenarioError(
            source, key, f"{key}={value!r} is not valid: expected {converter.__doc__}"
        ) from None
    return converted


def convert(items: Mapping[str, object], *, source: str) -> dict[str, object]:
    """Check and convert raw ``key -> value`` pairs from one source."""
    converted: dict[str, object] = {}
    for key, value in items.items():
        if key not in _CONVERTERS:
            raise ScenarioError(
                source,
                key,
                f"unknown key {key!r}: expected one of {', '.join(KEYS)}",
            )
        converted[key] = _check(key, value, source)
    return converted


def parse_header(text: str, *, source: str = HEADER) -> dict[str, object]:
    """Parse ``key=value;key=value`` into converted values (empty parts are ignored)."""
    items: dict[str, object] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ScenarioError(
                source,
                key or part,
                f"{part!r} is not a key=value pair: write e.g. 'ttft_ms=50;tps=100'",
            )
        items[key] = value.strip()
    return convert(items, source=source)


def parse_body(value: object) -> dict[str, object]:
    """Convert the body's ``mock`` object."""
    if not isinstance(value, Mapping):
        raise ScenarioError(
            BODY_FIELD,
            BODY_FIELD,
            f'expected an object like {{"ttft_ms": 50}}, got {type(value).__name__}',
        )
    return convert(value, source=BODY_FIELD)


def resolve(defaults: Scenario, header: str | None, body: object = None) -> Scenario:
    """The scenario for one request: defaults, then the header, then the body field."""
    scenario = defaults
    if header is not None:
        scenario = scenario.merged(parse_header(header))
    if body is not None:
        scenario = scenario.merged(parse_body(body))
    return scenario
