"""Holds sends back and releases them together every 200 ms, as HAProxy does without
``option http-no-delay`` (and as Nagle's algorithm can).

Each token still reaches the client within about 200 ms of its making, so ``trickle`` passes,
with a warning that names the batching.
"""

PATCHES = [
    (
        "        relay(upstream, client_wants_usage),\n",
        "        batched(relay(upstream, client_wants_usage)),\n",
    ),
    (
        "@app.post(CHAT_PATH)\n",
        "BATCH_S = 0.2\n"
        "\n\n"
        "async def batched(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:\n"
        '    """What ``body`` produced, sent every BATCH_S as one piece."""\n'
        "    held: list[bytes] = []\n"
        "    done = asyncio.Event()\n"
        "\n"
        "    async def take() -> None:\n"
        "        try:\n"
        "            async for piece in body:\n"
        "                held.append(piece)\n"
        "        finally:\n"
        "            done.set()\n"
        "\n"
        "    taker = asyncio.create_task(take())\n"
        "    try:\n"
        "        while not done.is_set():\n"
        "            try:\n"
        "                await asyncio.wait_for(done.wait(), BATCH_S)\n"
        "            except TimeoutError:\n"
        "                pass\n"
        "            if held:\n"
        '                piece = b"".join(held)\n'
        "                held.clear()\n"
        "                yield piece\n"
        "    finally:\n"
        "        taker.cancel()\n"
        "\n\n"
        "@app.post(CHAT_PATH)\n",
    ),
]
