"""Broken: no heartbeats; the stream is silent whenever the upstream is."""

FAILS = {"keepalive"}
PATCHES = [
    (
        "            try:\n"
        "                async with asyncio.timeout(HEARTBEAT_S):\n"
        "                    item = await queue.get()\n"
        "            except TimeoutError:\n"
        "                yield HEARTBEAT\n"
        "                continue\n",
        "            item = await queue.get()\n",
    )
]
