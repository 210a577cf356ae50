"""Broken: usage is taken only from a chunk whose ``choices`` is empty.

That is where OpenAI puts it, but some servers send the usage on their last chunk that still
has choices. Those counts never reach the log, and the client that did not ask for usage gets
it anyway (Envoy AI Gateway, LiteLLM).
"""

FAILS = {"usage"}
PATCHES = [
    (
        '    if chunk.get("usage"):\n        usage.take(chunk["usage"])\n',
        '    if chunk.get("usage") and not chunk.get("choices"):\n'
        '        usage.take(chunk["usage"])\n',
    )
]
