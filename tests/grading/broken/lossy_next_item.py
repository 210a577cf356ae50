"""Broken: the heartbeat timer leaves its read of the queue running when it fires.

``asyncio.wait`` on a ``queue.get()`` task gives up after the timeout but does not cancel the
task: the abandoned read takes the next event off the queue, and nobody ever sends it. One
event is lost per heartbeat; the stream still ends with ``[DONE]``, and no timing check sees it.
"""

FAILS = {"integrity"}
PATCHES = [
    (
        "    try:\n"
        "        async with asyncio.timeout(HEARTBEAT_S):\n"
        "            return await queue.get()\n"
        "    except TimeoutError:\n"
        "        return None\n",
        "    get = asyncio.ensure_future(queue.get())\n"
        "    done, _ = await asyncio.wait((get,), timeout=HEARTBEAT_S)\n"
        "    return get.result() if done else None  # the get left behind takes the next item\n",
    )
]
