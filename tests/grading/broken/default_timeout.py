"""Broken: a bare ``httpx.AsyncClient()``, whose default read timeout is 5 s."""

FAILS = {"long_stream"}
PATCHES = [
    (
        "    async with httpx.AsyncClient(base_url=upstream_url, timeout=TIMEOUT) as client:\n",
        "    async with httpx.AsyncClient(base_url=upstream_url) as client:\n",
    )
]
