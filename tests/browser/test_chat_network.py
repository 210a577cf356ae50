"""labkit.chat.network.FlakyNetwork: a TCP forwarder that drops every open connection on demand
and lets the next ones through, over real sockets and without a browser."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from labkit import ServerStartError, ThreadServer, serve
from labkit.chat.network import FlakyNetwork

pytestmark = pytest.mark.sockets

PIECES = 20
PIECE_S = 0.05  # the whole stream takes 1 s; the drop comes after its first few pieces
DROP_AFTER_PIECES = 3
NOTICED_WITHIN_S = 0.5  # the server sees its client leave within this of the drop (not 2 s)


def _app(left: list[float]) -> Starlette:
    """``/count``: PIECES numbered lines, one every PIECE_S; when the client goes away, the time
    goes into ``left``."""

    async def count(request: Request) -> StreamingResponse:
        async def lines() -> AsyncIterator[bytes]:
            try:
                for number in range(PIECES):
                    yield f"{number}\n".encode()
                    await asyncio.sleep(PIECE_S)
            except asyncio.CancelledError:
                left.append(time.time())
                raise

        return StreamingResponse(lines(), media_type="text/plain")

    return Starlette(routes=[Route("/count", count)])


@pytest.fixture
def served() -> Iterator[tuple[ThreadServer, list[float]]]:
    left: list[float] = []
    with serve(_app(left), name="network-target") as server:
        yield server, left


def test_it_forwards_a_stream_byte_for_byte(served: tuple[ThreadServer, list[float]]) -> None:
    server, _ = served
    with FlakyNetwork(server.url) as network:
        through = httpx.get(network.url + "/count", timeout=10).content
        made = network.connections_made
    assert through == httpx.get(server.url + "/count", timeout=10).content
    assert through.endswith(f"{PIECES - 1}\n".encode()) and made == 1


def test_a_drop_ends_the_open_connection_at_both_ends_and_the_next_one_gets_through(
    served: tuple[ThreadServer, list[float]],
) -> None:
    server, left = served
    with FlakyNetwork(server.url) as network, httpx.Client(timeout=10) as client:
        got = b""
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("GET", network.url + "/count") as response,
        ):
            for piece in response.iter_raw():
                got += piece
                if got.count(b"\n") >= DROP_AFTER_PIECES and not network.drops:
                    dropped_at, cut = time.time(), network.drop()
        again = client.get(network.url + "/count").content
        made, still_open = network.connections_made, network.open_connections
    assert cut == 1 and network.drops == 1
    assert left and left[0] - dropped_at < NOTICED_WITHIN_S, (left, dropped_at)
    assert again.endswith(f"{PIECES - 1}\n".encode())
    assert made == 2 and still_open <= 1  # a fresh connection; the client may keep it alive


def test_a_target_that_is_not_a_plain_http_url_is_refused_with_what_to_pass() -> None:
    with pytest.raises(ServerStartError, match=r"got 'https://example\.org'\. Pass the server"):
        FlakyNetwork("https://example.org")
