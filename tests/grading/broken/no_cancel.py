"""Broken: when the client leaves, nothing closes the upstream response.

The body generator stops, but the reader task goes on reading the upstream (and nothing else
closes it), so the upstream keeps generating tokens nobody will read. A resumable answer's
producer stops its body the same way, on Stop and when the grace period ends, so neither stops
the upstream either.
"""

FAILS = {"cancel", "cancel_before_first_token", "resume_stop", "resume_grace"}
PATCHES = [
    (
        "            reader.cancel()  # the client left: stop reading, which closes the upstream\n",
        "            pass\n",
    ),
    ("        background=BackgroundTask(upstream.aclose),\n", ""),
]
