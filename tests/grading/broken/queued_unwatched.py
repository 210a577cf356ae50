"""Broken: the route waits for the upstream's headers with nothing watching the client.

An engine whose slots are all busy sends no headers until one frees. Meanwhile the route sits in
``client.send`` where nobody watches the client: one that gives up is noticed only once the
request has left the queue and started, so the engine keeps it queued and then starts it for
nobody (LiteLLM #31499).
"""

FAILS = {"cancel_queued"}
PATCHES = [
    (
        "        upstream = await while_connected(request, client.send(upstream_request, "
        "stream=True))\n",
        "        upstream = await client.send(upstream_request, stream=True)\n",
    )
]
