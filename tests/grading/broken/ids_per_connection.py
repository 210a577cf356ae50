"""Broken: a resumed connection numbers its events from 1 again.

The events are the right ones, but their ids are places in this connection, not in the answer:
a client that drops a resumed connection comes back with a cursor that means an earlier event,
and gets again what it had.
"""

FAILS = {"resume", "resume_twice"}
PATCHES = [
    (
        '            yield f"id: {seq}\\n".encode() + event\n',
        '            yield f"id: {seq - after}\\n".encode() + event  # per connection\n',
    ),
]
