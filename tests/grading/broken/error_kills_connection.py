"""Broken: an upstream failure mid-stream raises out of the body generator.

The exception ends the response without a terminating chunk: clients see a broken
connection instead of an error event they can show.
"""

FAILS = {"midstream_error"}
PATCHES = [
    (
        '        return error_event(item.message), "error"\n',
        "        raise RuntimeError(item.message)\n",
    )
]
