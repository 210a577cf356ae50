"""Broken: a synchronous ``httpx.Client`` inside async code.

Every wait for the upstream (for the headers, for the next line) blocks the event loop:
nothing else runs meanwhile, no heartbeat, no disconnect noticed, no other request served.
"""

FAILS = {"cancel_before_first_token", "keepalive", "concurrency"}
PATCHES = [
    (
        "    async with httpx.AsyncClient(base_url=upstream_url, timeout=TIMEOUT) as client:\n",
        "    with httpx.Client(base_url=upstream_url, timeout=TIMEOUT) as client:\n",
    ),
    (
        "    client: httpx.AsyncClient = request.app.state.client\n",
        "    client: httpx.Client = request.app.state.client\n",
    ),
    ("        upstream = await client.send(", "        upstream = client.send("),
    (
        "        async for line in upstream.aiter_lines():\n",
        "        for line in upstream.iter_lines():\n            await asyncio.sleep(0)\n",
    ),
    ("        await upstream.aclose()\n", "        upstream.close()\n", 2),
    ("        content = await upstream.aread()\n", "        content = upstream.read()\n"),
    ("BackgroundTask(upstream.aclose)", "BackgroundTask(upstream.close)"),
]
