"""Broken: the replay log always lives in the proxy's own process, ``REDIS_URL`` or not.

One replica alone is the reference: it resumes and stops its own streams, so every check of the
lab passes. Behind a load balancer, a resume or a Stop that lands on another replica than the
one generating the answer finds nothing there (a 404), and the answer runs on for nobody until
its grace period ends. Only ``resume_replica`` (profile ``gateway``, two replicas on one Redis)
sees it.
"""

FAILS = {"resume_replica"}
PATCHES = [
    (
        "    if REDIS_URL:\n"
        "        return RedisLog(REDIS_URL, REPLAY_EVENTS, REPLAY_KEEP_S, RESUME_GRACE_S)\n",
        "",
    ),
]
