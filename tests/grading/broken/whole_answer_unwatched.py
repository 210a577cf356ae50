"""Broken: a whole (non-streamed) answer is read with nothing watching the client.

The route awaits the upstream's whole body before it returns; Starlette watches the client only
while it sends a response body, so a client that hangs up meanwhile goes unnoticed and the
upstream generates the whole answer for nobody (LiteLLM #37140).
"""

FAILS = {"cancel_whole_answer"}
PATCHES = [
    (
        "            return await while_connected(request, forward_whole(upstream))\n",
        "            return await forward_whole(upstream)\n",
    )
]
