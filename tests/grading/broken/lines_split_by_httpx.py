"""Broken: the reader splits the upstream's body with httpx's ``aiter_lines``.

httpx ends a line wherever ``str.splitlines`` does: at U+2028, U+2029, U+0085 and five control
characters too, where SSE ends one only at CR and LF. An engine that writes its JSON as UTF-8
sends a model's U+2028 raw inside a ``data:`` line; cut in two, the event's JSON is broken and
its text never reaches the client. The stream still ends with ``[DONE]``.
"""

FAILS = {"integrity"}
PATCHES = [
    (
        "        async for event in sse_events(sse_lines(upstream.aiter_bytes())):\n",
        "        async for event in sse_events(upstream.aiter_lines()):\n",
    )
]
