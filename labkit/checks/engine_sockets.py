"""The engine's end of the proxy's connections: which one the proxy closed, and when.

``llama-server`` notices that a client has gone at its next token, but while it reads a prompt
(no tokens yet) only after a whole second without news (``labkit.checks.engine_books``). When
it stops is then the proxy's time plus up to a second of the engine's own: too coarse to tell a
proxy that closes at once from one that closes at its first heartbeat. So
``cancel_before_first_token`` times the proxy where it acts, on its TCP connection to the
engine. When the proxy closes it, the kernel moves the engine's end from ESTABLISHED to
CLOSE_WAIT at once, and there it stays until the engine closes its end too (LAST_ACK, then
gone). When the engine closes first (a response it does not keep alive), its end goes to
FIN_WAIT and TIME_WAIT instead, which this module does not count.

It reads Linux's TCP tables (``/proc/net/tcp``, ``tcp6``), so it sees an engine on this
machine's loopback (the sandbox shares it); ``EngineSockets.for_url`` returns None elsewhere,
and the check then goes by the engine's books alone.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

__all__ = ["EngineSockets", "tcp_ends"]

TABLES: Final = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
ESTABLISHED: Final = "01"
CLOSED_BY_PEER: Final = frozenset({"08", "09"})  # CLOSE_WAIT, LAST_ACK
CLOSED_BY_US: Final = frozenset({"04", "05", "06", "0B"})  # FIN_WAIT1/2, TIME_WAIT, CLOSING
LISTEN: Final = "0A"
POLL_S: Final = 0.01

End = tuple[str, int]  # the peer's address and port, as the table writes them


def tcp_ends(tables: str, port: int) -> dict[End, str]:
    """The connections whose local end is ``port`` in the text of Linux TCP tables: the peer's
    (address, port) and the state code of our end (``01`` ESTABLISHED, ``08`` CLOSE_WAIT, ...)."""
    ends: dict[End, str] = {}
    for line in tables.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1] or fields[3] == LISTEN:
            continue
        local, remote, state = fields[1], fields[2], fields[3]
        try:
            if int(local.rsplit(":", 1)[1], 16) != port:
                continue
            address, peer_port = remote.rsplit(":", 1)
            ends[(address, int(peer_port, 16))] = state
        except ValueError:
            continue
    return ends


class EngineSockets:
    """The connections to one local port, from the kernel's TCP tables."""

    def __init__(self, port: int) -> None:
        self.port = port

    @classmethod
    def for_url(cls, url: str) -> EngineSockets | None:
        """For an engine on this machine's loopback whose TCP tables we can read; else None."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            local = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            local = False
        if not local or parts.port is None or not TABLES[0].is_file():
            return None
        return cls(parts.port)

    def ends(self) -> dict[End, str]:
        text = ""
        for table in TABLES:
            try:
                text += table.read_text() + "\n"
            except OSError:
                continue
        return tcp_ends(text, self.port)

    def open_ends(self) -> set[End]:
        """The peers whose connection to the engine is established now."""
        return {end for end, state in self.ends().items() if state == ESTABLISHED}

    async def closed_by_peer(self, watched: set[End], timeout_s: float) -> float | None:
        """When (``time.time()``) the first of ``watched`` was closed from the other side, or
        None if none was within ``timeout_s``. Gone without a trace counts as closed by the
        other side too (an engine that closed first keeps a TIME_WAIT end)."""
        deadline = time.monotonic() + timeout_s
        while watched:
            now = self.ends()
            for end in watched:
                state = now.get(end)
                if state in CLOSED_BY_PEER or state is None:
                    return time.time()
            watched = {end for end in watched if now.get(end) not in CLOSED_BY_US}
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_S)
        return None
