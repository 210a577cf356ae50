"""Undo a response's Content-Encoding chunk by chunk, so each chunk decodes when it arrives."""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["Decompressor"]


class Decompressor:
    """Undo Content-Encoding incrementally, so each raw chunk's bytes decode when they arrive."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        self._zlib: Any = None
        if encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(wbits=31)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj(wbits=47)  # zlib or gzip header, auto-detected
        self._raw_deflate = encoding == "deflate"

    def decode(self, data: bytes) -> bytes:
        if self._zlib is None:
            return data
        try:
            out: bytes = self._zlib.decompress(data)
        except zlib.error:
            if not self._raw_deflate:
                raise
            self._zlib = zlib.decompressobj(wbits=-15)  # headerless deflate
            self._raw_deflate = False
            out = self._zlib.decompress(data)
        return out

    def flush(self) -> bytes:
        return b"" if self._zlib is None else bytes(self._zlib.flush())
