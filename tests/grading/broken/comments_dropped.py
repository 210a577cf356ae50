"""Broken: an upstream's SSE comments are taken as a sign of life, then dropped.

Each comment comes off the queue before the heartbeat timer runs out, so no heartbeat is due;
then ``pass_on`` drops it. While an upstream sends comments (OpenRouter's ``: OPENROUTER
PROCESSING`` before a slow first token) the client hears nothing at all, and a load balancer's
idle timeout cuts the stream the heartbeats were meant to keep alive.
"""

FAILS = {"keepalive_under_comments"}
PATCHES = [
    (
        '    if all(line.startswith(":") for line in event.split("\\n")):\n'
        '        return f"{event}\\n\\n".encode(), None\n',
        "",
    ),
    (
        "    if send is None and quiet_s >= HEARTBEAT_S:\n"
        "        send = HEARTBEAT  # an event we drop is no sign of life to the client (07)\n",
        "",
    ),
]
