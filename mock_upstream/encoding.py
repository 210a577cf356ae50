"""Content coding: a whole answer is gzip-encoded when the request accepts gzip, as providers do.

OpenAI's and Anthropic's APIs gzip a unary JSON answer for a client that asks for it, and
every SDK asks (httpx, under ``openai`` and ``anthropic``, sends ``Accept-Encoding: gzip,
deflate`` and decodes the body itself). So a proxy that relays a unary answer's raw bytes
without its ``Content-Encoding`` hands its client gzip it cannot read, and one that reads the
body through its HTTP client gets it decoded. Streams are never compressed here: an event
stream that passes through a compressor without a flush after every event arrives in one piece
at the end (notebook 03).

:func:`accepts_gzip` reads ``Accept-Encoding`` as RFC 9110 (section 12.5.3) says: codings
are case-insensitive, each may carry a weight ``q`` from 0 to 1 (``q=0``: not acceptable), an
explicit ``gzip`` (or ``x-gzip``) wins over ``*``, and a header that names neither accepts
only the identity. A missing header is answered plain, as servers do.
"""

from __future__ import annotations

import gzip
import re
from typing import Any, Final, Literal

from starlette.responses import JSONResponse, Response

Coding = Literal["gzip"]

GZIP: Final[Coding] = "gzip"
_GZIP_NAMES: Final = frozenset({"gzip", "x-gzip"})
#: RFC 9110's ``qvalue``: 0 to 1 with at most three decimals.
_QVALUE: Final = re.compile(r"0(\.[0-9]{0,3})?|1(\.0{0,3})?")
#: zlib's default level; ``mtime=0`` keeps the bytes the same for the same answer.
_LEVEL: Final = 6


def _weight(params: list[str]) -> float | None:
    """The element's ``q`` (1 when it has none), or ``None`` when it is malformed."""
    weight = 1.0
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() != "q":
            continue
        value = value.strip()
        if not _QVALUE.fullmatch(value):
            return None
        weight = float(value)
    return weight


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether a request with this ``Accept-Encoding`` value accepts a gzip-encoded body."""
    if accept_encoding is None:
        return False
    named: float | None = None
    wildcard: float | None = None
    for element in accept_encoding.split(","):
        coding, *params = (part.strip() for part in element.split(";"))
        coding = coding.lower()
        weight = _weight(params) if coding else None
        if weight is None:
            continue  # an empty or malformed element says nothing
        if coding in _GZIP_NAMES:
            named = weight if named is None else max(named, weight)
        elif coding == "*":
            wildcard = weight if wildcard is None else max(wildcard, weight)
    if named is not None:
        return named > 0
    return wildcard is not None and wildcard > 0


def whole_answer(
    body: dict[str, Any], accept_encoding: str | None
) -> tuple[Response, Coding | None]:
    """A successful unary JSON answer, gzip-encoded if ``accept_encoding`` accepts gzip, and the
    coding it was sent with (``None``: plain). Either way it says ``Vary: Accept-Encoding``, as
    its bytes depend on that header."""
    plain = JSONResponse(body, headers={"Vary": "Accept-Encoding"})
    if not accepts_gzip(accept_encoding):
        return plain, None
    encoded = gzip.compress(plain.body, compresslevel=_LEVEL, mtime=0)
    headers = {"Content-Encoding": GZIP, "Vary": "Accept-Encoding"}
    return Response(encoded, media_type=plain.media_type, headers=headers), GZIP
