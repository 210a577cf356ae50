"""Broken: a bare ``httpx.AsyncClient()``, whose default read timeout is 5 s."""

FAILS = {"long_stream"}
PATCHES = [
    (
        "    return httpx.AsyncClient(base_url=upstream_url, timeout=upstream_timeout(), "
        "limits=limits)\n",
        "    return httpx.AsyncClient(base_url=upstream_url, limits=limits)\n",
    )
]
