"""Broken: the replay log keeps every event of an answer (its deque has no bound).

Every answer is kept whole for ``REPLAY_KEEP_S`` after its end, so the log grows with the
answers' length times the answers running; and a client away for longer than ``REPLAY_EVENTS``
events is given a replay the bound says it cannot have.
"""

FAILS = {"replay_bound"}
PATCHES = [("deque(maxlen=self.max_events)", "deque()")]
