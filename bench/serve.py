"""uvicorn on a listening socket inherited from the bench, with the socket's real family.

Run as ``python -m bench.serve --fd N [--factory] [--loop L] [--http H] [--backlog B]
TARGET``. This is ``uvicorn --fd N TARGET`` without its flaw: uvicorn wraps the descriptor as
``socket.fromfd(N, AF_UNIX, SOCK_STREAM)`` whatever it is, asyncio and uvloop then take every
accepted TCP connection for a Unix one and leave Nagle's algorithm on, and a small write that
follows another on a kept-alive connection (a fast first token after the response head) waits
for the peer's delayed ACK, about 40 ms on Linux. Measured here, 100 steady streams through the
aiohttp proxy: added TTFT p50 12.2 ms with ``--fd``, 1.8-1.9 ms with this (279 of 363 first tokens
due 20 ms after the request had come 40-49 ms after it). Here the descriptor becomes
``socket.socket(fileno=N)``, which asks the kernel for the family, type and protocol, and
uvicorn is handed that socket (``Server.run(sockets=[...])``).

It lives in ``bench`` and imports neither ``labkit`` nor ``mock_upstream`` on purpose: the served
process should hold only what it serves. With ``labkit`` imported a full garbage collection took
47 ms here instead of 21 ms, and the mock's p99 interval error at 300 streams went from 3-11 ms
to 35-55 ms.
"""

from __future__ import annotations

import argparse
import socket
import sys

import uvicorn

GRACEFUL_TIMEOUT_S = 1


def inherited_socket(fd: int) -> socket.socket:
    """The listening socket behind ``fd``, with the family and protocol the kernel reports."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise SystemExit(
            f"--fd {fd} is not a socket this process inherited ({exc.strerror or exc}): "
            "start it with the descriptor in pass_fds"
        ) from None
    if sock.type != socket.SOCK_STREAM:
        raise SystemExit(f"--fd {fd} is a {sock.type.name} socket: expected a listening TCP one")
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve")
    parser.add_argument("target", help="module:attribute, as uvicorn takes it")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--factory", action="store_true")
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--http", default="h11", choices=["h11", "httptools"])
    parser.add_argument("--backlog", type=int, default=2048)
    args = parser.parse_args(argv)

    sock = inherited_socket(args.fd)
    config = uvicorn.Config(
        args.target,
        factory=args.factory,
        loop=args.loop,
        http=args.http,
        backlog=args.backlog,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT_S,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
