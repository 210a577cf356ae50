"""Broken: no heartbeats; the stream is silent whenever the upstream is."""

FAILS = {"keepalive"}
PATCHES = [
    (
        "            item = await next_item(queue)\n",
        "            item = await queue.get()\n",
    )
]
