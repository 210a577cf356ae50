"""The property checks: one catalogue used by the notebooks, the grader and the tests.

Each check drives real clients over real sockets against a proxy that forwards to the mock
upstream, and returns a ``CheckResult``: ``passed``, a one-line ``verdict`` with no numbers in
it (notebooks print it and nbval compares it), the measured ``evidence`` and a ``hint`` that
names the notebook step teaching the fix::

    from labkit import run_checks
    for result in run_checks(proxy.url, upstream_url=upstream.url, only=["trickle"]):
        print(result)

Ids, in catalogue order: trickle, cancel, cancel_before_first_token, cancel_queued,
cancel_whole_answer, usage, midstream_error, upstream_status, content_encoding, long_stream,
keepalive, keepalive_under_comments, integrity, concurrency, backpressure, passthrough,
error_before_first_token, tool_calls, resume, resume_twice, resume_stop, resume_grace,
replay_bound. Each check is one module of one shape: ``ID``, ``STEP``, ``SUMMARY``, ``BUDGET_S``,
``observe(ctx)`` (the experiment, returning what it saw) and ``judge(evidence, budget)`` (the
verdict, pure), and on a real engine ``observe_on_engine``/``judge_on_engine`` or else
``MOCK_ONLY``; the catalogue (``labkit.checks.catalogue``) is built from those modules. Each
module's docstring describes its experiment and why a correct and a broken proxy land far
apart. The last five (notebook 15, resumable streams) need the proxy started
with settings of their own (``catalogue.proxy_env_for``). The ``gateway`` profile adds
minute_stream and resume_replica (two replicas of the proxy on one Redis:
``CheckContext.replica_url``).

Verdicts depend on the property, not on the grader's speed: counts of tokens, states and ratios
of the experiment's own times where possible, and wide margins where a time is the measure. A
check that cannot decide because the machine is too slow (``concurrency``, ``backpressure``) is
*inconclusive*: skipped, so never a FAIL, with the measured reason in its evidence (see
``labkit.checks.result``). Below one CPU the time budgets, and every timeout inside a check,
stretch with the run's ``Budget`` (``labkit.checks.machine``), which ``run_checks`` reads once
and hands down.

With ``upstream="engine"`` the proxy forwards to a real engine instead of the mock: the
checks that need no fault injection (``catalogue.ENGINE_IDS``) run one after another against
it, reading the engine's own counters (``labkit.checks.engine_books``); the others come back
skipped, their verdict saying why only the mock can run them.
"""

from labkit.checks.catalogue import CHECK_IDS, CHECKS, LANES, Check
from labkit.checks.result import CheckResult
from labkit.checks.runner import arun_checks, run_checks

__all__ = ["CHECKS", "CHECK_IDS", "LANES", "Check", "CheckResult", "arun_checks", "run_checks"]
