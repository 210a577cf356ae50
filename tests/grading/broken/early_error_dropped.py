"""Broken: events that come before the answer has an id are skipped as empty.

The filter is meant for keep-alive noise before the first chunk, but an upstream that fails
before its first token sends exactly such an event: ``data: {"error": ...}``, then (vLLM)
``data: [DONE]``. The client gets a successful completion with no text, and the log says
``completed`` (vllm-project/vllm#40986, and gateways in front of it).
"""

FAILS = {"error_before_first_token"}
PATCHES = [
    (
        '    usage.id = usage.id or chunk.get("id")\n',
        '    usage.id = usage.id or chunk.get("id")\n'
        "    if usage.id is None:\n"
        "        return None, None  # nothing of the answer yet: skip it\n",
    )
]
