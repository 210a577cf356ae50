"""The reference proxy carries many hundreds of streams at once: its upstream pool is sized for
streams, not httpx's default of 100 connections.

Every open stream holds one upstream connection for its whole life. With httpx's default
``Limits`` (100 connections) the 101st concurrent stream waits in the pool for a stream to end,
and once it has waited the pool timeout (``upstream_timeout``'s 10 s) it fails with a 502:
500 streams opened at once with a 3 s first token gave 300 answers and 200 x 502 through a
``make_client`` that kept the default.

Experiment: the mock and the proxy each in a child process of its own, on real sockets; STREAMS
streams opened at the same moment, each with a TTFT_S first token and a few tokens after it.
Pass: every one answers 200 and ends with ``data: [DONE]``. Through a 100-connection pool the
streams go through a hundred at a time, each hundred one stream later than the last, and those
that wait longer than the pool timeout fail.

The first tokens are late here either way (the 500 requests take the proxy, the mock and this
process a few seconds of CPU to open, on two shared cores), so the test judges how the streams
end, not when their first token came.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from labkit import Capture, acapture_stream, serve_subprocess
from labkit.servers import SubprocessServer

pytestmark = pytest.mark.sockets

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "proxy.py"

STREAMS: Final = 500
TTFT_S: Final = 3.0
PACE: Final = {"ttft_ms": round(TTFT_S * 1000), "tps": 20, "tokens": 5}
CLIENT_TIMEOUT_S: Final = 40.0


@pytest.fixture
def mock() -> Iterator[SubprocessServer]:
    with serve_subprocess("mock_upstream.served:app", name="pool-mock") as server:
        yield server


def chat(seed: int) -> dict[str, object]:
    return {
        "model": "lab-model",
        "messages": [{"role": "user", "content": "Why does every stream hold a connection?"}],
        "stream": True,
        "mock": {**PACE, "seed": seed},
    }


async def burst(url: str) -> tuple[list[Capture | BaseException], float]:
    """STREAMS streams started together; their captures (or what each raised), and the time
    the last one took to end."""
    started = time.monotonic()
    results = await asyncio.gather(
        *(
            acapture_stream(url, json=chat(9000 + i), timeout=CLIENT_TIMEOUT_S)
            for i in range(STREAMS)
        ),
        return_exceptions=True,
    )
    return list(results), time.monotonic() - started


def outcomes(results: list[Capture | BaseException]) -> Counter[str]:
    """How each stream ended: ``200 done``, ``502 error``, or the exception's type."""
    return Counter(
        f"{r.status} {r.terminal}" if isinstance(r, Capture) else type(r).__name__ for r in results
    )


@pytest.mark.timeout(120)
def test_the_reference_completes_five_hundred_concurrent_streams(
    mock: SubprocessServer, tmp_path: Path
) -> None:
    env = {"UPSTREAM_URL": mock.url, "USAGE_LOG": str(tmp_path / "usage.jsonl")}
    with serve_subprocess(str(REFERENCE), name="pool-proxy", env=env) as proxy:
        results, elapsed = asyncio.run(burst(f"{proxy.url}/v1/chat/completions"))
    ended = outcomes(results)
    captures = [r for r in results if isinstance(r, Capture)]
    ttfts = sorted(c.ttft for c in captures if c.ttft is not None)
    print(
        f"{STREAMS} streams: {dict(ended)}; first tokens after {ttfts[0] if ttfts else 0:.1f}"
        f"-{ttfts[-1] if ttfts else 0:.1f} s; all ended after {elapsed:.1f} s"
    )
    assert ended == Counter({"200 done": STREAMS}), (
        f"of {STREAMS} concurrent streams: {dict(ended)}. Every open stream holds one upstream "
        "connection: give make_client httpx.Limits sized for the streams a proxy carries "
        "(httpx's default pool has 100 connections)."
    )
