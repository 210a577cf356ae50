"""Broken: the whole response is collected and sent in one piece at the end.

The classic cause is a layer that holds bytes back (a compressor without a sync flush, a
middleware that reads the body). It also holds back the heartbeats, and everything the
upstream sends stays in memory until the end. A resumable answer comes out of it as one event
with one id, so a client can neither resume it half-way nor from a recent id.
"""

FAILS = {
    "trickle",
    "keepalive",
    "backpressure",
    "keepalive_under_comments",
    "resume",
    "resume_twice",
    "replay_bound",
}
PATCHES = [
    (
        "        relay(upstream, client_wants_usage),\n",
        "        buffered(relay(upstream, client_wants_usage)),\n",
    ),
    (
        "@app.post(CHAT_PATH)\n",
        "async def buffered(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:\n"
        "    chunks = [chunk async for chunk in body]\n"
        '    yield b"".join(chunks)\n'
        "\n\n"
        "@app.post(CHAT_PATH)\n",
    ),
]
