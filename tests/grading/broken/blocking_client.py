"""Broken: a synchronous ``httpx.Client`` inside async code.

Every wait for the upstream (for the headers, for the next line) blocks the event loop:
nothing else runs meanwhile, no heartbeat, no disconnect noticed, no other request served. The
route's watch cannot run either: a client that leaves while its request waits in the engine's
queue, or while a whole answer is generated, is noticed only once the blocking send returns.
Its lines come from the sync client's ``iter_lines``, which also ends a line at U+2028, so it
loses those events too (``integrity``).
"""

FAILS = {
    "integrity",  # the sync client's iter_lines ends a line at U+2028 too (sse_lines' lesson)
    "cancel_before_first_token",
    "cancel_queued",
    "cancel_whole_answer",
    "keepalive",
    "concurrency",
}
PATCHES = [
    (
        "    async with make_client(upstream_url) as client:\n",
        "    with make_client(upstream_url) as client:\n",
    ),
    (
        "def make_client(upstream_url: str) -> httpx.AsyncClient:\n",
        "def make_client(upstream_url: str) -> httpx.Client:\n",
    ),
    (
        "    return httpx.AsyncClient(base_url=upstream_url, timeout=upstream_timeout(), "
        "limits=limits)\n",
        "    return httpx.Client(base_url=upstream_url, timeout=upstream_timeout(), "
        "limits=limits)\n",
    ),
    (
        "    client: httpx.AsyncClient = request.app.state.client\n",
        "    client: httpx.Client = request.app.state.client\n",
    ),
    (
        "        upstream = await while_connected(request, client.send(upstream_request, "
        "stream=True))\n",
        "        upstream = client.send(upstream_request, stream=True)\n",
    ),
    (
        "        async for event in sse_events(sse_lines(upstream.aiter_bytes())):\n",
        "        async for event in sse_events(blocking_lines(upstream)):\n",
    ),
    (
        "async def read_events(",
        "async def blocking_lines(upstream: httpx.Response) -> AsyncIterator[str]:\n"
        "    for line in upstream.iter_lines():\n"
        "        await asyncio.sleep(0)\n"
        "        yield line\n"
        "\n\n"
        "async def read_events(",
    ),
    ("        await upstream.aclose()\n", "        upstream.close()\n", 2),
    ("        content = await upstream.aread()  # decoded", "        content = upstream.read()  #"),
    ("BackgroundTask(upstream.aclose)", "BackgroundTask(upstream.close)"),
]
