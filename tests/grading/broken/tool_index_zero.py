"""Broken: every tool-call delta is re-numbered to index 0.

The client files each fragment under its ``index``, so two parallel calls become one whose id,
name and arguments run together, and the arguments no longer parse (BerriAI/litellm#21331).
"""

FAILS = {"tool_calls"}
PATCHES = [
    (
        '    if "error" in chunk:\n        return f"{event}\\n\\n".encode(), "error"\n',
        '    if "error" in chunk:\n        return f"{event}\\n\\n".encode(), "error"\n'
        '    for choice in chunk.get("choices") or []:\n'
        '        for call in (choice.get("delta") or {}).get("tool_calls") or []:\n'
        '            call["index"] = 0  # one tool call at a time, surely\n'
        "    if '\"tool_calls\"' in data:\n"
        '        return f"data: {json.dumps(chunk)}\\n\\n".encode(), None\n',
    )
]
