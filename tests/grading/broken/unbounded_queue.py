"""Broken: the queue between the upstream reader and the client has no bound.

With a slow client the reader goes on at the upstream's speed and everything it reads stays
in the proxy's memory.
"""

FAILS = {"backpressure"}
PATCHES = [("asyncio.Queue(maxsize=QUEUE_EVENTS)", "asyncio.Queue()")]
