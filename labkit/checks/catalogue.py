"""The catalogue: every check with its stable id, its time budget and the step that teaches it.

Ids are part of the public contract (README, "The submission contract"): ``labkit grade
--json`` reports by them and the notebooks ask for them. The order here is the order of every
report.

Lanes say what may run side by side. Checks in one lane run one after another; lanes run at the
same time. The grader gives every lane its own proxy process, so a blocked event loop or a
memory spike in one experiment cannot spill into another's numbers. The ``backpressure``
lane drives its upstream at full speed; it needs a mock of its own, and against
a shared one ``arun_checks`` runs it after the others (``SOLO_LANE``).

Profiles: ``CHECKS`` are the lab's (``CHECK_IDS``, what every grading runs, each in seconds).
``GATEWAY_CHECKS`` add what only a deployed gateway meets: the real durations
(``minute_stream``, over a minute) and replicas behind a load balancer (``resume_replica``, two
copies of the proxy on one Redis): ``select(profile="gateway")`` runs both.

On a real engine (``labkit grade --engine``) a check runs its ``on_engine`` experiment, which
reads the engine's own books instead of the mock's records, within ``engine_budget_s``. The
engine is one shared machine, not a mock started per lane: those checks run one after another
(``ENGINE_IDS``, catalogue order). A check that needs what only the mock does (faults on demand,
exact pacing, SSE comments) has no ``on_engine`` and says why in ``mock_only``; the report lists
it as not run, with that reason.

Settings: a check whose bounds come from the proxy's own settings (notebook 15's grace period
and replay log: ``RESUME_GRACE_S``, ``REPLAY_EVENTS``) names them in ``proxy_env``, and the
grader starts its lane's proxy with them (``proxy_env_for(lane)``), so checks that need
different values of one setting sit in different lanes. Graded by URL, where the proxy's
settings are not the grader's to choose, those checks are not run.

Replicas: a check that needs more than one copy of the proxy sharing a replay log says how many
in ``replicas`` (``resume_replica``: 2). The grader starts that many for its lane, on one
private Redis (``REDIS_URL``), and passes the second as ``CheckContext.replica_url``; graded by
URL, ``--replica`` names it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from labkit.checks import (
    backpressure,
    cancel,
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
    resume_cancel,
    resume_replica,
    tool_calls,
    trickle,
    upstream_status,
    usage,
    whole_answer,
)
from labkit.checks.context import CheckContext
from labkit.checks.result import CheckResult

__all__ = [
    "ALL_IDS",
    "CHECKS",
    "CHECK_IDS",
    "ENGINE_IDS",
    "GATEWAY_CHECKS",
    "LANES",
    "PROFILES",
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


CheckRun = Callable[[CheckContext], Awaitable[CheckResult]]
FAULTS = "needs fault injection, which only the mock does"
RESUME_ONLY = "needs the same answer twice from the upstream, which only the mock's seeds give"
PACED_RECORD = "needs the mock's record of when a paced answer stopped"


@dataclass(frozen=True)
class Check:
    """One property check: ``run`` drives the experiment; ``budget_s`` bounds it; ``step`` is
    the notebook that teaches the property. ``on_engine`` is the experiment against a real
    engine, bounded by ``engine_budget_s``; without it, ``mock_only`` says why it has none.
    An inconclusive result is run again (``labkit.checks.runner``) unless ``retry_inconclusive``
    is False: for an experiment whose one long window is its own second chance.
    ``proxy_env`` is the environment the experiment needs the proxy started with (its bounds
    are computed from those settings); see ``proxy_env_for``. ``replicas``: how many copies of
    the proxy it needs, sharing one Redis (see the module docstring)."""

    id: str
    run: CheckRun
    budget_s: float
    summary: str
    step: str
    on_engine: CheckRun | None = None
    engine_budget_s: float = 0.0
    mock_only: str = ""
    retry_inconclusive: bool = True
    proxy_env: Mapping[str, str] = field(default_factory=dict, hash=False)
    replicas: int = 1


CHECKS: tuple[Check, ...] = (
    Check(
        "trickle",
        trickle.check_trickle,
        10.0,
        "tokens reach the client as they are generated",
        trickle.STEP,
        on_engine=trickle.check_trickle_on_engine,
        engine_budget_s=45.0,
    ),
    Check(
        "cancel",
        cancel.check_cancel,
        8.0,
        "a client disconnect stops the upstream promptly",
        cancel.STEP,
        on_engine=cancel.check_cancel_on_engine,
        engine_budget_s=60.0,
    ),
    Check(
        "cancel_before_first_token",
        cancel.check_cancel_before_first_token,
        6.0,
        "a disconnect while waiting for the first token also stops it",
        cancel.STEP,
        on_engine=cancel.check_cancel_before_first_token_on_engine,
        engine_budget_s=60.0,
    ),
    Check(
        queued.ID,
        queued.check_cancel_queued,
        queued.BUDGET_S,
        "a disconnect while the request waits in the upstream's queue lets it drop the request",
        queued.STEP,
        on_engine=queued.check_cancel_queued_on_engine,
        engine_budget_s=queued.ENGINE_BUDGET_S,
    ),
    Check(
        whole_answer.ID,
        whole_answer.check_cancel_whole_answer,
        whole_answer.BUDGET_S,
        "a disconnect during a whole (non-streamed) answer stops it",
        whole_answer.STEP,
        on_engine=whole_answer.check_cancel_whole_answer_on_engine,
        engine_budget_s=whole_answer.ENGINE_BUDGET_S,
    ),
    Check(
        "usage",
        usage.check_usage,
        10.0,
        "the usage log has the true counts, once, right outcome",
        usage.STEP,
        on_engine=usage.check_usage_on_engine,
        engine_budget_s=90.0,
    ),
    Check(
        "midstream_error",
        midstream_error.check_midstream_error,
        10.0,  # a stream that hangs is given up after LIMIT_S (5 s), beside three others
        "a failure after the first token becomes an in-stream error event",
        midstream_error.STEP,
        mock_only=FAULTS + " (an error after the first token)",
    ),
    Check(
        "upstream_status",
        upstream_status.check_upstream_status,
        6.0,
        "an upstream 429/5xx before the stream keeps its status and Retry-After",
        upstream_status.STEP,
        mock_only=FAULTS + " (an error status before the stream)",
    ),
    Check(
        encoding.ID,
        encoding.check_content_encoding,
        encoding.BUDGET_S,
        "a whole answer reaches the client readable, whatever encoding it accepts",
        encoding.STEP,
        mock_only="needs an upstream that gzips whole answers, which the grading engine does not",
    ),
    Check(
        "long_stream",
        long_stream.check_long_stream,
        16.0,
        "a slow first token and a long stream survive",
        long_stream.STEP,
        mock_only="needs a first token slower than a client's default timeout, on demand, "
        "which only the mock's pacing gives",
    ),
    Check(
        "keepalive",
        keepalive.check_keepalive,
        16.0,  # about three times the 5.5 s experiment: a loaded machine stretched it past 10 s
        "SSE comments while the upstream is silent",
        keepalive.STEP,
        mock_only="needs an upstream silent for seconds mid-stream, which only the mock's "
        "pacing gives",
    ),
    Check(
        comment_silence.ID,
        comment_silence.check_keepalive_under_comments,
        comment_silence.BUDGET_S,
        "an upstream's SSE comments never leave the client silent for long",
        comment_silence.STEP,
        mock_only="needs an upstream that sends SSE comments before a slow first token, which "
        "only the mock's pacing gives",
    ),
    Check(
        integrity.ID,
        integrity.check_integrity,
        integrity.BUDGET_S,
        "the client gets every upstream event, once and in order",
        integrity.STEP,
        mock_only="needs the same text twice from the upstream and a silence mid-stream, which "
        "only the mock's seeds and pacing give",
    ),
    Check(
        "concurrency",
        concurrency.check_concurrency,
        26.0 + concurrency.IDLE_EXPIRY_S,  # a second attempt first waits for idle connections
        "many concurrent streams all get through",
        concurrency.STEP,
        on_engine=concurrency.check_concurrency_on_engine,
        engine_budget_s=75.0,
    ),
    Check(
        "backpressure",
        backpressure.check_backpressure,
        backpressure.WINDOW_S + 5.0,
        "a slow reader does not grow the proxy memory",
        backpressure.STEP,
        mock_only="needs an upstream streaming flat out, thousands of tokens a second, which "
        "only the mock does",
        retry_inconclusive=False,  # a machine too slow for its long window is as slow again
    ),
    Check(
        "passthrough",
        passthrough.check_passthrough,
        10.0,
        "upstream SSE comments never reach the client as data",
        passthrough.STEP,
        mock_only="needs SSE comments from the upstream, which only the mock sends",
    ),
    Check(
        "error_before_first_token",
        error_before_first_token.check_error_before_first_token,
        25.0,
        "a 200 whose first event is an error stays an error, in the stream and the log",
        error_before_first_token.STEP,
        mock_only=FAULTS + " (an error event before the first token)",
    ),
    Check(
        "tool_calls",
        tool_calls.check_tool_calls,
        10.0,
        "parallel tool calls keep their index and id; the SDK assembles both",
        tool_calls.STEP,
        mock_only="needs parallel tool-call deltas on demand, which only the mock sends",
    ),
    Check(
        resume.ID,
        resume.check_resume,
        resume.BUDGET_S,
        "a resumable stream survives a dropped connection, nothing lost or repeated",
        resume.STEP,
        mock_only=RESUME_ONLY,
    ),
    Check(
        resume.TWICE_ID,
        resume.check_resume_twice,
        resume.BUDGET_S,
        "a resumable stream survives two drops, the second from the resumed connection",
        resume.STEP,
        mock_only=RESUME_ONLY,
    ),
    Check(
        resume_cancel.STOP_ID,
        resume_cancel.check_resume_stop,
        resume_cancel.STOP_BUDGET_S,
        "Stop cancels a resumable stream's upstream at once",
        resume.STEP,
        mock_only=PACED_RECORD,
        proxy_env={"RESUME_GRACE_S": f"{resume_cancel.STOP_GRACE_S:g}"},
    ),
    Check(
        resume_cancel.GRACE_ID,
        resume_cancel.check_resume_grace,
        resume_cancel.GRACE_BUDGET_S,
        "a drop is not a Stop; nobody back within the grace period stops the upstream",
        resume.STEP,
        mock_only=PACED_RECORD,
        proxy_env={"RESUME_GRACE_S": f"{resume_cancel.GRACE_S:g}"},
    ),
    Check(
        replay_bound.ID,
        replay_bound.check_replay_bound,
        replay_bound.BUDGET_S,
        "the replay log is bounded: an old cursor is refused, a recent one resumes",
        resume.STEP,
        mock_only="needs an answer of a known length, which only the mock's pacing gives",
        proxy_env={"REPLAY_EVENTS": str(replay_bound.BOUND)},
    ),
)
CHECK_IDS: tuple[str, ...] = tuple(check.id for check in CHECKS)
GATEWAY_CHECKS: tuple[Check, ...] = (
    Check(
        "minute_stream",
        minute_stream.check_minute_stream,
        minute_stream.BUDGET_S,
        "a stream of over a minute, mostly silent, gets through",
        minute_stream.STEP,
        mock_only="needs a minute-long, mostly silent stream, which only the mock's pacing gives",
    ),
    Check(
        resume_replica.ID,
        resume_replica.check_resume_replica,
        resume_replica.BUDGET_S,
        "a stream resumes, and stops, on another replica than the one that took it",
        resume.STEP,
        mock_only=RESUME_ONLY,
        replicas=2,
    ),
)
ALL_IDS: tuple[str, ...] = CHECK_IDS + tuple(check.id for check in GATEWAY_CHECKS)
BY_ID = {check.id: check for check in CHECKS + GATEWAY_CHECKS}
#: The checks that run against a real engine, in the order they run there (one at a time).
ENGINE_IDS: tuple[str, ...] = tuple(i for i in ALL_IDS if BY_ID[i].on_engine is not None)

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
            "Use --profile gateway to add the slow checks a deployed gateway meets."
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
