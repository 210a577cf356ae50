"""Broken: an upstream failure mid-stream raises out of the body generator.

The exception ends the response without a terminating chunk: clients see a broken
connection instead of an error event they can show.
"""

FAILS = {"midstream_error"}
PATCHES = [
    (
        "                yield error_event(item.message)\n                return\n",
        "                raise RuntimeError(item.message)\n",
    )
]
