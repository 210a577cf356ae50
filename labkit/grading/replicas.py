"""The grader's Redis: what two replicas of a learner's proxy share, for the checks that need
more than one copy of it (``Check.replicas``: ``resume_replica``, profile ``gateway``).

``start_shared_redis`` runs one private redis-server per grading, on 127.0.0.1, started by the
grading worker like its mocks, so it is born in the grading's own network namespace
(``labkit.grading.network``). The proxies reach it the way they reach the mock: bubblewrap gives
a proxy new mounts, PIDs and users but no network of its own, so a sandboxed proxy's loopback is
the grading's, where the Redis and the mocks listen. Each replica gets ``REDIS_URL``
(``redis://127.0.0.1:PORT/0``) among its settings, nothing else: no password to hide, since no
one outside the grading can reach that loopback.

Learner code talks to this Redis, and it runs with the grader's rights (root, where the grader
runs as root), outside the proxy's sandbox. So the commands that reach past Redis's own data are
renamed away (``DISABLED``): ``CONFIG`` (``CONFIG SET dir`` and ``dbfilename``, then ``SAVE``,
write a file anywhere its user may write), ``MODULE`` (load a shared object: run code),
``DEBUG``, and the replication commands; Redis 7 refuses most of them by default already, the
6.0 of Ubuntu 22.04 does not. Its memory is capped (``MAX_MEMORY``, refusing writes past it
rather than growing outside every proxy's cgroup).

When the machine has no redis-server, the checks that need it are skipped (``no_redis``),
saying that the grader's machine lacks it and how to install it: nothing a learner did, so
never a failure.
"""

from __future__ import annotations

from collections.abc import Iterable

from labkit.checks import CheckResult
from labkit.errors import REDIS_INSTALL_HINT
from labkit.servers import RedisServer, next_name

__all__ = ["DISABLED", "MAX_MEMORY", "REDIS_ENV", "no_redis", "start_shared_redis"]

REDIS_ENV = "REDIS_URL"
DISABLED = ("CONFIG", "MODULE", "DEBUG", "SLAVEOF", "REPLICAOF", "SYNC", "PSYNC", "MIGRATE")
MAX_MEMORY = "256mb"
NO_REDIS = "not run: the grader's machine has no redis-server, which the replicas share"


def start_shared_redis() -> RedisServer:
    """A private redis-server on a free 127.0.0.1 port, with ``DISABLED`` renamed away and its
    memory capped; returns once it answers PING. Raises ``RedisNotFoundError`` without
    redis-server, another ``ServerStartError`` when it does not start."""
    options = ["--maxmemory", MAX_MEMORY, "--maxmemory-policy", "noeviction"]
    for command in DISABLED:
        options += ["--rename-command", command, ""]
    return RedisServer(name=next_name("grading-redis"), options=options).start()


def no_redis(ids: Iterable[str]) -> dict[str, CheckResult]:
    """Skipped results for the checks ``ids``, which need replicas on a Redis this machine
    cannot run: the grader's machine, not the proxy, is missing something."""
    return {
        check_id: CheckResult(
            check_id,
            False,
            NO_REDIS,
            {},
            f"the grader's machine needs redis-server (this says nothing of the proxy): "
            f"{REDIS_INSTALL_HINT} Then grade again.",
            skipped=True,
        )
        for check_id in ids
    }
