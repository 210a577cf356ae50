"""Reads ahead into a file: the queue between the upstream reader and the client is a temporary
file that never fills.

With a slow client the reader goes on at the upstream's speed, as with an unbounded queue, but
what it reads waits on disk, not in the proxy's memory (lighttpd's default, and nginx's
``proxy_buffering on`` past its memory buffers, do the same). ``backpressure`` must fail it
without saying its memory grew.
"""

PATCHES = [
    ("import asyncio\n", "import asyncio\nimport tempfile\n"),
    (
        "    queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=QUEUE_EVENTS)\n",
        "    return SpoolQueue()  # type: ignore[return-value]\n"
        "    queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=QUEUE_EVENTS)\n",
    ),
    (
        "    return queue\n    ### END SOLUTION\n",
        "    return queue\n    ### END SOLUTION\n"
        "\n\n"
        "class SpoolQueue:\n"
        '    """Events appended to a temporary file as they come; read back in order."""\n'
        "\n"
        "    def __init__(self) -> None:\n"
        "        self.file = tempfile.TemporaryFile()\n"
        "        self.written = self.read = 0  # file offsets\n"
        "        self.failure: UpstreamFailed | None = None  # the last item, never spooled\n"
        "        self.ready = asyncio.Event()\n"
        "\n"
        "    def empty(self) -> bool:\n"
        "        return self.read == self.written and self.failure is None\n"
        "\n"
        "    async def put(self, item: Item) -> None:\n"
        "        if isinstance(item, UpstreamFailed):\n"
        "            self.failure = item\n"
        "        else:\n"
        "            data = item.encode()\n"
        "            self.file.seek(self.written)\n"
        '            self.file.write(len(data).to_bytes(4, "big") + data)\n'
        "            self.written += 4 + len(data)\n"
        "        self.ready.set()\n"
        "\n"
        "    def get_nowait(self) -> Item:\n"
        "        if self.read < self.written:\n"
        "            self.file.seek(self.read)\n"
        '            size = int.from_bytes(self.file.read(4), "big")\n'
        "            self.read += 4 + size\n"
        "            return self.file.read(size).decode()\n"
        "        if self.failure is not None:\n"
        "            failure, self.failure = self.failure, None\n"
        "            return failure\n"
        "        raise asyncio.QueueEmpty\n"
        "\n"
        "    async def get(self) -> Item:\n"
        "        while self.empty():\n"
        "            self.ready.clear()\n"
        "            await self.ready.wait()\n"
        "        return self.get_nowait()\n",
    ),
]
