"""The catalogue: every check, built from its module, in the order of every report.

Ids are part of the public contract (README, "The submission contract"): ``labkit grade
--json`` reports by them and the notebooks ask for them. The order here is the order of every
report.

One shape for a check. Each check is one module of ``labkit.checks`` that exports:

- ``ID`` (its stable id), ``STEP`` (the notebook that teaches the property) and ``SUMMARY``
  (one line for the tables);
- ``BUDGET_S``: the seconds the whole experiment may take at one CPU (stretched below one CPU
  by the run's ``machine.Budget``, as every timeout inside the check is);
- ``async def observe(ctx) -> Evidence``: the experiment, over real sockets, returning what it
  saw as a frozen dataclass of its own;
- ``def judge(evidence, budget) -> CheckResult``: the verdict, pure, tested in process on
  constructed evidence (tests/checks/);
- on a real engine, ``ENGINE_BUDGET_S``, ``observe_on_engine`` and ``judge_on_engine`` of the
  same shape; or, for a check that needs what only the mock does, ``MOCK_ONLY``: why (the
  report lists it as not run on an engine, with that reason);
- where a check needs them, ``RETRY_INCONCLUSIVE``, ``PROXY_ENV`` and ``REPLICAS`` (below).

``Check.from_module`` reads that shape (and refuses a module that lacks part of it);
``CHECKS`` and ``GATEWAY_CHECKS`` are the modules in report order. Helpers two checks share
live in private modules (``_hang_up``, ``_resumable``), which define no ``ID``.

Lanes say what may run side by side. Checks in one lane run one after another; lanes run at the
same time. The grader gives every lane its own proxy process, so a blocked event loop or a
memory spike in one experiment cannot spill into another's numbers. The ``backpressure``
lane drives its upstream at full speed; it needs a mock of its own, and against
a shared one ``arun_checks`` runs it after the others (``SOLO_LANE``).

Profiles: ``CHECKS`` are the lab's (``CHECK_IDS``, what every grading runs, each in seconds).
``GATEWAY_CHECKS`` add what only a deployed gateway meets: the real durations
(``minute_stream``, over a minute) and replicas behind a load balancer (``resume_replica``, two
copies of the proxy on one Redis): ``select(profile="gateway")`` runs both.

On a real engine (``labkit grade --engine``) a check runs its engine experiment, which reads the
engine's own books instead of the mock's records, within ``ENGINE_BUDGET_S``. The engine is one
shared machine, not a mock started per lane: those checks run one after another
(``ENGINE_IDS``, catalogue order).

Retries: an inconclusive result is run again (``labkit.checks.runner``) unless the module says
``RETRY_INCONCLUSIVE = False``: for an experiment whose one long window is its own second
chance (``backpressure``).

Settings: a check whose bounds come from the proxy's own settings (notebook 15's grace period
and replay log: ``RESUME_GRACE_S``, ``REPLAY_EVENTS``) names them in ``PROXY_ENV``, and the
grader starts its lane's proxy with them (``proxy_env_for(lane)``), so checks that need
different values of one setting sit in different lanes. Graded by URL, where the proxy's
settings are not the grader's to choose, those checks are not run.

Replicas: a check that needs more than one copy of the proxy sharing a replay log says how many
in ``REPLICAS`` (``resume_replica``: 2). The grader starts that many for its lane, on one
private Redis (``REDIS_URL``), and passes the second as ``CheckContext.replica_url``; graded by
URL, ``--replica`` names it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

from labkit.checks import (
    backpressure,
    cancel,
    cancel_before_first_token,
    comment_silence,
    concurrency,
    encoding,
    error_before_first_token,
    integrity,
    keepalive,
    long_stream,
    midstream_error,
    minute_stream,
    passthrough,
    queued,
    replay_bound,
    resume,
    resume_grace,
    resume_replica,
    resume_stop,
    resume_twice,
    tool_calls,
    trickle,
    upstream_status,
    usage,
    whole_answer,
)
from labkit.checks.context import CheckContext
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

__all__ = [
    "ALL_IDS",
    "CHECKS",
    "CHECK_IDS",
    "ENGINE_IDS",
    "GATEWAY_CHECKS",
    "LANES",
    "PROFILES",
    "SHAPE",
    "SOLO_LANE",
    "Check",
    "Profile",
    "lanes_for",
    "proxy_env_for",
    "replicas_for",
    "select",
]

Profile = Literal["lab", "gateway"]
PROFILES: tuple[Profile, ...] = ("lab", "gateway")

Observe = Callable[[CheckContext], Awaitable[Any]]
Judge = Callable[[Any, Budget], CheckResult]

#: The names every check module exports; and, with an engine experiment, ENGINE_SHAPE too
#: (without one, ``MOCK_ONLY``).
SHAPE = ("ID", "STEP", "SUMMARY", "BUDGET_S", "observe", "judge")
ENGINE_SHAPE = ("ENGINE_BUDGET_S", "observe_on_engine", "judge_on_engine")


@dataclass(frozen=True)
class Check:
    """One property check, as its module exports it (see the module docstring):
    ``observe`` runs the experiment and ``judge`` decides on what it saw, within ``budget_s``
    at one CPU; ``step`` is the notebook that teaches the property. ``observe_on_engine`` and
    ``judge_on_engine`` are the experiment against a real engine, within ``engine_budget_s``;
    without them, ``mock_only`` says why there is none. ``retry_inconclusive``,
    ``proxy_env`` and ``replicas``: see the module docstring."""

    id: str
    step: str
    summary: str
    budget_s: float
    observe: Observe
    judge: Judge
    engine_budget_s: float = 0.0
    observe_on_engine: Observe | None = None
    judge_on_engine: Judge | None = None
    mock_only: str = ""
    retry_inconclusive: bool = True
    proxy_env: Mapping[str, str] = field(default_factory=dict, hash=False)
    replicas: int = 1

    @classmethod
    def from_module(cls, module: ModuleType) -> Check:
        """The check a module of ``labkit.checks`` defines. Raises ``TypeError`` naming what
        the module lacks of the shape (``SHAPE``, and ``ENGINE_SHAPE`` or ``MOCK_ONLY``)."""
        name = module.__name__
        missing = [n for n in SHAPE if not hasattr(module, n)]
        engine = [n for n in ENGINE_SHAPE if hasattr(module, n)]
        if engine and len(engine) < len(ENGINE_SHAPE):
            missing += [n for n in ENGINE_SHAPE if n not in engine]
        if not engine and not hasattr(module, "MOCK_ONLY"):
            missing.append(f"MOCK_ONLY (or {', '.join(ENGINE_SHAPE)})")
        if engine and hasattr(module, "MOCK_ONLY"):
            raise TypeError(
                f"Expected {name} to have an engine experiment or MOCK_ONLY; got both. "
                "Remove MOCK_ONLY from a check that runs on an engine."
            )
        if missing:
            raise TypeError(
                f"Expected {name} to export a check's shape; it lacks {', '.join(missing)}. "
                "See labkit.checks.catalogue for the names every check module exports."
            )
        return cls(
            id=module.ID,
            step=module.STEP,
            summary=module.SUMMARY,
            budget_s=float(module.BUDGET_S),
            observe=module.observe,
            judge=module.judge,
            engine_budget_s=float(getattr(module, "ENGINE_BUDGET_S", 0.0)),
            observe_on_engine=getattr(module, "observe_on_engine", None),
            judge_on_engine=getattr(module, "judge_on_engine", None),
            mock_only=getattr(module, "MOCK_ONLY", ""),
            retry_inconclusive=getattr(module, "RETRY_INCONCLUSIVE", True),
            proxy_env=dict(getattr(module, "PROXY_ENV", {})),
            replicas=getattr(module, "REPLICAS", 1),
        )

    @property
    def on_engine(self) -> bool:
        """Whether the check has an experiment for a real engine."""
        return self.observe_on_engine is not None

    async def run(self, ctx: CheckContext) -> CheckResult:
        """Observe, then judge what was seen for ``ctx.budget``."""
        return self.judge(await self.observe(ctx), ctx.budget)

    async def run_on_engine(self, ctx: CheckContext) -> CheckResult:
        """``run``, against the real engine ``ctx`` points at."""
        if self.observe_on_engine is None or self.judge_on_engine is None:
            raise TypeError(f"{self.id} has no engine experiment: {self.mock_only}")
        return self.judge_on_engine(await self.observe_on_engine(ctx), ctx.budget)


CHECKS: tuple[Check, ...] = tuple(
    Check.from_module(module)
    for module in (
        trickle,
        cancel,
        cancel_before_first_token,
        queued,
        whole_answer,
        usage,
        midstream_error,
        upstream_status,
        encoding,
        long_stream,
        keepalive,
        comment_silence,
        integrity,
        concurrency,
        backpressure,
        passthrough,
        error_before_first_token,
        tool_calls,
        resume,
        resume_twice,
        resume_stop,
        resume_grace,
        replay_bound,
    )
)
CHECK_IDS: tuple[str, ...] = tuple(check.id for check in CHECKS)
GATEWAY_CHECKS: tuple[Check, ...] = (
    Check.from_module(minute_stream),
    Check.from_module(resume_replica),
)
ALL_IDS: tuple[str, ...] = CHECK_IDS + tuple(check.id for check in GATEWAY_CHECKS)
BY_ID = {check.id: check for check in CHECKS + GATEWAY_CHECKS}
#: The checks that run against a real engine, in the order they run there (one at a time).
ENGINE_IDS: tuple[str, ...] = tuple(i for i in ALL_IDS if BY_ID[i].on_engine)

LANES: tuple[tuple[str, ...], ...] = (
    # error_before_first_token shares its lane with upstream_status: both leave log lines
    # without an id (the proxy never saw one), which a shared usage log cannot tell apart.
    # cancel_whole_answer and cancel_queued log cancelled lines without an id too: each comes
    # after the checks of its lane that read the log, and last in its lane: a proxy that blocks
    # its event loop is still stuck in the whole answer, or in the queue, for seconds after.
    (
        "long_stream",
        "upstream_status",
        "error_before_first_token",
        "passthrough",
        "cancel_whole_answer",
    ),
    ("keepalive", "midstream_error", "cancel_before_first_token", "integrity", "cancel_queued"),
    ("trickle", "cancel", "usage", "tool_calls", "content_encoding"),
    # keepalive_under_comments waits seconds for a first token: beside concurrency, not in it
    ("concurrency", "keepalive_under_comments"),
    # notebook 15's: each lane's proxy starts with its checks' proxy_env (grace 30 s, or 3 s)
    ("resume", "resume_twice", "resume_stop"),
    ("replay_bound", "resume_grace"),
    ("backpressure",),
    ("minute_stream",),  # gateway profile only: a minute of mostly waiting, beside the others
    ("resume_replica",),  # gateway profile only: two proxies of its own, on one Redis
)
SOLO_LANE = ("backpressure",)


def select(only: str | Iterable[str] | None, profile: Profile = "lab") -> tuple[str, ...]:
    """The ids to run, in catalogue order: ``only`` these, or every check of ``profile``
    (``"lab"``: ``CHECK_IDS``; ``"gateway"``: those and ``GATEWAY_CHECKS``). Raises
    ``ValueError`` naming an unknown id or profile."""
    if profile not in PROFILES:
        raise ValueError(
            f"Expected a profile from {', '.join(PROFILES)}; got {profile!r}. "
            'Use profile="gateway" to add the slow checks a deployed gateway meets.'
        )
    if only is None:
        return CHECK_IDS if profile == "lab" else ALL_IDS
    wanted = {only} if isinstance(only, str) else set(only)
    unknown = sorted(wanted - set(ALL_IDS))
    if unknown:
        raise ValueError(
            f"Expected check ids from {', '.join(ALL_IDS)}; got unknown {', '.join(unknown)}. "
            "Fix the spelling (ids use underscores)."
        )
    return tuple(i for i in ALL_IDS if i in wanted)


def proxy_env_for(ids: Iterable[str]) -> dict[str, str]:
    """The environment a proxy must be started with to run the checks ``ids`` (each check's
    ``proxy_env``, together): what the grader gives each lane's proxy, and what a notebook that
    runs notebook 15's checks starts its proxy with. Raises ``ValueError`` when two of them need
    different values of one setting: run those against proxies of their own."""
    env: dict[str, str] = {}
    owner: dict[str, str] = {}
    for check_id in ids:
        for name, value in BY_ID[check_id].proxy_env.items():
            if env.setdefault(name, value) != value:
                raise ValueError(
                    f"Expected checks that can share one proxy; got {owner[name]} with "
                    f"{name}={env[name]} and {check_id} with {name}={value}. Run them against "
                    "proxies of their own, each started with proxy_env_for(its checks)."
                )
            owner.setdefault(name, check_id)
    return env


def replicas_for(lane: Iterable[str]) -> int:
    """How many copies of the proxy the checks ``lane`` need (1: one, no Redis)."""
    return max((BY_ID[check_id].replicas for check_id in lane), default=1)


def lanes_for(ids: Iterable[str]) -> list[tuple[str, ...]]:
    """The lanes restricted to ``ids``, empty lanes left out."""
    chosen = set(ids)
    lanes = [tuple(i for i in lane if i in chosen) for lane in LANES]
    return [lane for lane in lanes if lane]
