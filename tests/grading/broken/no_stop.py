"""Broken: Stop answers 200 ``cancelled`` but stops nothing.

The answer goes on, generating and billed, for a reader who said stop, until nobody has read it
for the grace period.
"""

FAILS = {"resume_stop"}
PATCHES = [
    (
        "        found = await log.stop(stream_id)\n",
        "        found = True  # the answer is not told to stop\n",
    ),
]
