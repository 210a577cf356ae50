"""Broken: the upstream client keeps httpx's default pool of 100 connections.

Every open stream holds one upstream connection for its whole life, so the 101st concurrent
stream waits in the pool until another stream ends (and fails with a 502 once it has waited
the pool timeout). One stream, or fifty, cannot show it.
"""

FAILS = {"concurrency"}
PATCHES = [
    (
        "    return httpx.AsyncClient(base_url=upstream_url, timeout=upstream_timeout(), "
        "limits=limits)\n",
        "    return httpx.AsyncClient(base_url=upstream_url, timeout=upstream_timeout())\n",
    )
]
