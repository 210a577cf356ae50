"""Broken: the client's Accept-Encoding is passed upstream, and the whole answer's raw bytes are
relayed.

An upstream that gzips whole answers for a client that accepts gzip (providers do) then sends
compressed bytes, and the proxy hands them on without their ``Content-Encoding``: the client
gets gzip where its headers say JSON.
"""

FAILS = {"content_encoding"}
PATCHES = [
    (
        'FORWARDED_HEADERS = ("authorization", "x-mock-scenario")\n',
        'FORWARDED_HEADERS = ("authorization", "x-mock-scenario", "accept-encoding")\n',
    ),
    (
        "        content = await upstream.aread()  # decoded: gzip from the upstream is not the "
        "client's\n",
        '        content = b"".join([part async for part in upstream.aiter_raw()])\n',
    ),
]
