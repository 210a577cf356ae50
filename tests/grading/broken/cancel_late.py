"""Broken: the route waits for the first event before it returns the response.

Waiting "to be sure the stream works" happens outside the response body, where Starlette
does not watch for a disconnect: a client that leaves before the first token goes unnoticed
until that token arrives (the LiteLLM bug).
"""

FAILS = {"cancel_before_first_token"}
PATCHES = [
    (
        "    return StreamingResponse(\n        relay(upstream, client_wants_usage),\n",
        "    events = relay(upstream, client_wants_usage)\n"
        "    first = await anext(events)  # make sure the stream really started\n"
        "    return StreamingResponse(\n        prepend(first, events),\n",
    ),
    (
        "@app.post(CHAT_PATH)\n",
        "async def prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:\n"
        "    yield first\n"
        "    async for chunk in rest:\n"
        "        yield chunk\n"
        "\n\n"
        "@app.post(CHAT_PATH)\n",
    ),
]
