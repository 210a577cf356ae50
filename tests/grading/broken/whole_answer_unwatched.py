"""Broken: the route watches the client only for a streamed request.

"A whole answer is just a request": the learner watches the wait for a stream's headers and
sends a non-streamed request unwatched. An engine sends a whole answer's headers with the answer,
once it is generated, so the route waits in ``client.send`` for all of it, where Starlette does
not watch the client: one that hangs up meanwhile goes unnoticed, and the engine generates the
whole answer for nobody (the gap gateways left on their non-streamed routes).
"""

FAILS = {"cancel_whole_answer"}
PATCHES = [
    (
        "        upstream = await while_connected(request, client.send(upstream_request, "
        "stream=True))\n",
        "        sending = client.send(upstream_request, stream=True)\n"
        "        upstream = await (while_connected(request, sending) if stream else sending)\n",
    )
]
