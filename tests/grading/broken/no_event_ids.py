"""Broken: ``follow`` sends the logged events without their ``id:`` lines.

The stream reads like any other, and a client that never drops sees nothing wrong; one that
drops cannot say where it was (``Last-Event-ID``), so it cannot resume at all.
"""

FAILS = {"resume", "resume_twice"}
PATCHES = [
    ('            yield f"id: {seq}\\n".encode() + event\n', "            yield event\n"),
]
