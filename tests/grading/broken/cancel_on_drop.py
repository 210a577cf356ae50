"""Broken: no grace period: the answer is stopped as soon as its first follower's connection
goes, as a plain stream is.

Stop works (the answer is already stopped), but a client that drops and comes back finds an
answer cut off where it left, and the upstream stopped generating for a reader who was coming
back.
"""

FAILS = {"resume", "resume_twice", "resume_grace"}
PATCHES = [
    (
        "            self.body_iterator, self.background = follow(log, stream_id, 0), None\n",
        "            self.body_iterator = follow(log, stream_id, 0)\n"
        "            self.background = BackgroundTask(log.stop, stream_id)  # runs on a drop too\n",
    ),
]
