"""Broken: an upstream line the proxy cannot read is passed on as a data line.

"Pass on what we do not understand" sounds safe, but an upstream SSE comment
(``: OPENROUTER PROCESSING``) then reaches the client as ``data: : OPENROUTER PROCESSING``,
which the OpenAI SDK cannot parse: the stream dies at the first comment
(mnfst/llm-gateway#2053).
"""

FAILS = {"passthrough"}
PATCHES = [
    (  # every event goes through the parser, comments too
        '    if all(line.startswith(":") for line in event.split("\\n")):\n'
        '        return f"{event}\\n\\n".encode(), None\n',
        "",
    ),
    (
        "        return None, None  # a broken frame would crash the client's parser: drop it\n",
        '        return f"data: {data or event}\\n\\n".encode(), None  # pass it on, then\n',
    ),
]
