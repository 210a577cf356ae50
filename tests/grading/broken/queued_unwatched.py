"""Broken: the route watches the client only while a whole answer is generated.

"A stream's headers come at once": the learner watches the long wait for a non-streamed answer,
and sends a streamed request unwatched. But an engine whose slots are all busy sends no headers
until one frees, and meanwhile the route sits in ``client.send`` where nobody watches the client:
one that gives up is noticed only once its request has left the queue and started, so the engine
keeps it queued, then starts it for nobody.
"""

FAILS = {"cancel_queued"}
PATCHES = [
    (
        "        upstream = await while_connected(request, client.send(upstream_request, "
        "stream=True))\n",
        "        sending = client.send(upstream_request, stream=True)\n"
        "        upstream = await (sending if stream else while_connected(request, sending))\n",
    )
]
