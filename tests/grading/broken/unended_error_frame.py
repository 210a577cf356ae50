"""Broken: ``error_event`` ends its frame with one newline instead of two.

An SSE event ends at a blank line. Without it the error event is still unfinished when the
stream ends, and every SSE client (the OpenAI SDK too) discards it: the client sees a short
answer that ends as if it had succeeded.
"""

FAILS = {"midstream_error"}
PATCHES = [("'upstream_error'))}\\n\\n\".encode()\n", "'upstream_error'))}\\n\".encode()\n")]
