"""Broken: completion tokens are counted as the number of chunks.

A chunk may carry several tokens, and the prompt is not counted at all: the log disagrees
with the upstream's own usage.
"""

FAILS = {"usage"}
PATCHES = [
    (
        '    if chunk.get("usage"):\n        usage.take(chunk["usage"])\n',
        '    if chunk.get("choices"):\n'
        "        usage.completion_tokens = (usage.completion_tokens or 0) + 1\n"
        "        usage.total_tokens = usage.completion_tokens\n"
        '    if chunk.get("usage"):\n',
    )
]
