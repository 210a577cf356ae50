"""Notebook 10's ``stall_deadline`` check passes the reference's ``make_queue`` and fails wrong
designs of it, each for its own reason.

The check is the notebook's own code (``stall_cases`` measures section 3's first two cases over
real sockets, ``judge_stall`` decides), taken from the notebook's cells and run here on the
reference ``solutions/proxy.py`` with only ``make_queue`` replaced. The learner designs the part
(the bound, what "took nothing" means, what giving up does), so the check must judge behaviour,
not code: a stuck client let go, its upstream closed, its connection ended, one ``cancelled``
line; a client behind a silent upstream served to the end.

Measured here (2 cores, load average 7-13 from other test runs): the reference passed, the mock
cancelled 0.87-2.6 s after the request at 3,894-11,959 of 150,000 tokens; each wrong design
failed with the complaint named below (28-30 s for the four at load 3-7, most of it the 15 s
wait of the design that never lets go). docs/measurements.md has the table.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nbformat
import pytest

from labkit import MockUpstream, capture_stream, chat_request, serve_subprocess
from labkit.servers import ServerHandle

pytestmark = pytest.mark.sockets

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "10_backpressure_and_slow_clients.ipynb"
REFERENCE = (ROOT / "solutions" / "proxy.py").read_text(encoding="utf-8")
QUEUE_AT = REFERENCE.index("def make_queue()")
#: Where make_queue ends: the next section (notebook 15's parts come after it).
QUEUE_END = REFERENCE.index("\n\n\n# ----", QUEUE_AT)

#: The notebook cells the check needs, found by what they define.
DEFINES = ("def start_proxy(", "def open_request(", "def stall_cases(", "def judge_stall(")

BOUNDED_ONLY = """def make_queue() -> asyncio.Queue[Item]:
    return asyncio.Queue(maxsize=QUEUE_EVENTS)
"""

STOPS_THE_READER_ONLY = """def make_queue() -> asyncio.Queue[Item]:
    queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    put = queue.put

    async def put_or_stop(item: Item) -> None:
        try:
            async with asyncio.timeout(STALL_DEADLINE_S):
                await put(item)
        except TimeoutError:
            raise asyncio.CancelledError from None  # the reader ends and closes the upstream

    queue.put = put_or_stop  # type: ignore[method-assign]
    return queue
"""

WATCHES_THE_GETS = """def make_queue() -> asyncio.Queue[Item]:
    body = asyncio.current_task()
    queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=QUEUE_EVENTS)
    loop = asyncio.get_running_loop()
    get, last = queue.get, [loop.time()]

    async def timed_get() -> Item:
        item = await get()
        last[0] = loop.time()
        return item

    def timed_get_nowait() -> Item:
        item = asyncio.Queue.get_nowait(queue)
        last[0] = loop.time()
        return item

    async def watch() -> None:
        while body is not None and not body.done():
            await asyncio.sleep(0.05)
            if loop.time() - last[0] > STALL_DEADLINE_S:  # no get for that long: a stall?
                body.cancel()
                return

    queue.get, queue.get_nowait = timed_get, timed_get_nowait  # type: ignore[method-assign]
    queue.watcher = loop.create_task(watch())  # type: ignore[attr-defined]
    return queue
"""

#: design -> the complaint its failure must make (None: it must pass)
DESIGNS: dict[str, tuple[str | None, str | None]] = {
    "reference": (None, None),
    "bounded, no deadline": (BOUNDED_ONLY, "nothing closed it"),
    "a deadline that stops the reader only": (STOPS_THE_READER_ONLY, "connection was left open"),
    "a deadline on the time since the last get": (
        WATCHES_THE_GETS,
        "a silent upstream is not a stuck client",
    ),
}


def notebook_check(upstream: ServerHandle, books: MockUpstream, work: Path) -> dict[str, Any]:
    """The notebook's own helpers and judge, run in a namespace that stands in for its kernel."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    namespace: dict[str, Any] = {
        "asyncio": asyncio,
        "json": json,
        "socket": socket,
        "time": time,
        "ThreadPoolExecutor": ThreadPoolExecutor,
        "capture_stream": capture_stream,
        "chat_request": chat_request,
        "serve_subprocess": serve_subprocess,
        "upstream": upstream,
        "mock": books,
        "WORK": work,
        "stall_seen": None,
        "quick_source": None,
    }
    for marker in DEFINES:
        cells = [c.source for c in nb.cells if c.cell_type == "code" and marker in c.source]
        assert len(cells) == 1, f"notebook 10 has {len(cells)} code cells with {marker!r}"
        exec(cells[0], namespace)  # the notebook's own code, as its kernel runs it
    return namespace


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("design", list(DESIGNS))
def test_the_stall_check_judges_the_design(
    design: str, mock: ServerHandle, books: MockUpstream, tmp_path: Path
) -> None:
    code, complaint = DESIGNS[design]
    check = notebook_check(mock, books, tmp_path)
    path = tmp_path / "proxy.py"
    path.write_text(
        REFERENCE
        if code is None
        else REFERENCE[:QUEUE_AT] + code.rstrip("\n") + REFERENCE[QUEUE_END:],
        encoding="utf-8",
    )
    log = tmp_path / "usage.jsonl"
    with check["start_proxy"](path, "stall-design", STALL_DEADLINE_S=0.5, USAGE_LOG=log) as proxy:
        seen = check["stall_cases"](proxy, log, 905)
    passed, wrong = check["judge_stall"](seen)
    print(f"{design}: {'PASS' if passed else 'FAIL'} {wrong} {json.dumps(seen)}")
    if complaint is None:
        assert passed, f"the reference failed the stall check: {wrong}; it saw {seen}"
    else:
        assert not passed, f"{design} passed the stall check; it saw {seen}"
        assert complaint in wrong, f"{design}: expected a complaint about {complaint!r}: {wrong}"
