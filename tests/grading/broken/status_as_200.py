"""Broken: an upstream error status before the stream is streamed on with status 200."""

FAILS = {"upstream_status"}
PATCHES = [("    if upstream.status_code >= 400 or not stream:\n", "    if not stream:\n")]
