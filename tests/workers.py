"""How ``make test`` runs the suite in two passes: the light tests on four workers, then the
heavy ones alone.

Most socket tests wait: on streams paced at tens of tokens a second, on a silence a check must
see, on a minute-long stream. Four pytest-xdist workers (``-m "not heavy" -n 4 --dist
loadfile``) still leave this two-core machine some idle time, and finish the tests in a
fraction of the time one process takes (docs/measurements.md). ``loadfile`` keeps a module's
tests on one worker, so a module-scoped fixture (a mock, a built bundle, the fault matrix)
starts once. (``--dist loadgroup`` would need ``xdist_group`` names, which pytest-xdist 3.8
cannot attach to pytest 9's node ids: it silently ignores them.)

A *heavy* test keeps this two-core machine busy on its own, and its timing would suffer beside
others: it starts the real engine (the ``engine`` fixture, or a test marked ``heavy``: the
engine decodes on both cores), grades several submissions at once, or grades inside CPU-limited
cgroups. Those run after, in one process, one at a time (``-m heavy``).

The modules that hold a ``slow`` test are dealt out first (``slow_modules_first``, with
``--no-loadscope-reorder``): xdist hands each worker the next module as it finishes one, and by
default it orders the modules by how many tests they hold, which left the minute-long modules of
one or two tests to the end, one worker busy with them while the others idled.

Each test runs once. A failure in either pass fails ``make test``: there is no second run that
would hide a test which fails by chance (a flaky test in a grader is a learner graded by
chance). The heavy pass still runs after a light pass with failures, so one run lists them all
(the Makefile's ``unit``; tests/test_make_unit.py).
"""

from __future__ import annotations

import pytest

HEAVY = "heavy"
HEAVY_HELP = (
    f"{HEAVY}: keeps the machine busy on its own (the real engine, several gradings at once, "
    'CPU-limited cgroups): `make test` runs these alone, after the others (-m "not heavy")'
)
ENGINE = "engine"  # tests/conftest.py's fixture: the real engine
SLOW = "slow"


def addmarker(config: pytest.Config) -> None:
    config.addinivalue_line("markers", HEAVY_HELP)


def mark_heavy(items: list[pytest.Item]) -> None:
    """Mark every test that uses the real engine ``heavy``. Runs before ``-m`` deselects (a
    wrapper hook in the conftest)."""
    for item in items:
        if ENGINE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.heavy)


def slow_modules_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: every module holding a ``slow`` test before the others, each
    group in collection order and each module's tests in theirs (every worker collects the same
    order, as xdist requires)."""
    slow = {item.path for item in items if item.get_closest_marker(SLOW) is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: False (slow) sorts first
