"""Broken: ``follow`` ignores the client's cursor and replays the answer from its first event.

The first connection is right (its cursor is 0); a resumed one gives the client every event it
already had again. With the log bounded, an answer longer than the bound cannot be resumed at
all: its first events are gone.
"""

FAILS = {"resume", "resume_twice", "replay_bound"}
PATCHES = [("    cursor = after\n", "    cursor = 0  # the client's cursor ignored\n")]
