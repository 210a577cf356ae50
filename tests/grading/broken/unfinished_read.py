"""Broken: ``read_events`` puts nothing on the queue when the upstream's lines run out.

An upstream that ends its body cleanly before ``data: [DONE]`` (a crash behind a proxy that
closed the response properly) leaves the body waiting on a queue nobody fills: the client gets
heartbeats for ever (or, before notebook 07, waits for ever). The dropped connection and the
upstream's own error event still work, so only a clean end without the terminal event shows it.
"""

FAILS = {"midstream_error"}
PATCHES = [
    (
        "        # Still being read after the end: the upstream closed before its `data: [DONE]`.\n"
        '        await queue.put(UpstreamFailed("the upstream closed the stream before it '
        'finished"))\n',
        "",
    )
]
