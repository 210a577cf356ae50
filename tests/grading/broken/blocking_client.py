"""Broken: a synchronous ``httpx.Client`` inside async code.

Every wait for the upstream (for the headers, for the next line) blocks the event loop:
nothing else runs meanwhile, no heartbeat, no disconnect noticed, no other request served. The
route's watch cannot run either: a client that leaves while its request waits in the engine's
queue, or while a whole answer is generated, is noticed only once the blocking send returns.
"""

FAILS = {
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
        "        async for event in sse_events(sse_lines(blocking_bytes(upstream))):\n",
    ),
    (
        "async def read_events(",
        "async def blocking_bytes(upstream: httpx.Response) -> AsyncIterator[bytes]:\n"
        "    for chunk in upstream.iter_bytes():\n"
        "        await asyncio.sleep(0)\n"
        "        yield chunk\n"
        "\n\n"
        "async def read_events(",
    ),
    ("        await upstream.aclose()\n", "        upstream.close()\n", 2),
    ("        content = await upstream.aread()  # decoded", "        content = upstream.read()  #"),
    ("BackgroundTask(upstream.aclose)", "BackgroundTask(upstream.close)"),
]
