"""Broken: an upstream error status becomes an exception, so the client gets a bare 500."""

FAILS = {"upstream_status"}
PATCHES = [
    (
        "    if upstream.status_code >= 400 or not stream:\n",
        "    upstream.raise_for_status()\n    if upstream.status_code >= 400 or not stream:\n",
    )
]
