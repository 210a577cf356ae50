"""What the mock remembers about each request, and the Prometheus metrics that sum it up.

One :class:`Recorder` per app (on ``app.state.recorder``) owns the records and its own
:class:`prometheus_client.CollectorRegistry`; nothing is process-global, so two apps in one
process never see each other's numbers. Every state change goes through the recorder, which
keeps the record and the metrics in step.

Tokens are counted twice, as a slow reader makes them differ: *generated* (decoded and billed,
``tokens_generated``, ``mock_tokens_generated_total``) and *sent* (in frames uvicorn's ``send``
took, that is past its flow control: ``tokens_sent``, ``mock_tokens_sent_total``). A client
that reads at once keeps them within a frame or two of each other; one that reads nothing
leaves ``tokens_sent`` standing still while ``tokens_generated`` goes on to the end, as on a
real engine (:mod:`mock_upstream.generation`).

A request that asks for ``slots`` (:mod:`mock_upstream.slots`) may wait for one before it
runs: its record is ``queued`` from its arrival until it is admitted (``queued_at``,
``admitted_at``), then ``running``; one whose client leaves while it waits ends ``cancelled``
without ever running. ``running`` counts admitted requests only, ``waiting`` queued ones::

    queued --admitted--> running --> completed | cancelled | errored
    queued --the client left--> cancelled (never ran)

Two families of names: the mock's own (``mock_*``, no labels) and the ones a real vLLM engine
exports (``vllm:*``, labelled ``model_name``), so a notebook cell that watches
``vllm:num_requests_running`` works unchanged against a real engine:
``vllm:num_requests_running`` (admitted and generating) and ``vllm:num_requests_waiting``
(queued for a slot), ``vllm:generation_tokens_total`` (generated, not sent),
``vllm:time_to_first_token_seconds`` and ``vllm:request_success_total{finished_reason}``
(``stop``, ``length``, or ``abort`` for a request whose client left; an errored request is
counted in ``mock_requests_errored_total`` only). As on vLLM, they exist from start-up
(and again after a reset), labelled with the mock's default model (``mock-gpt``), at 0; each
model a request names gets its own label set from then on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Api = Literal["chat", "responses", "messages"]
State = Literal["queued", "running", "completed", "cancelled", "errored"]
#: The states of a request that has not ended yet.
ACTIVE: Final[frozenset[State]] = frozenset({"queued", "running"})

MAX_RECORDS: Final = 10_000
TTFT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: ``vllm:request_success_total``'s ``finished_reason`` values, each exported from the start.
FINISHED_REASONS: Final = ("stop", "length", "abort")


@dataclass
class RequestRecord:
    """One request as the mock saw it. Times are ``time.time()`` floats, or ``None``.

    ``tokens_generated`` counts the completion tokens generated so far (what an engine decodes
    and bills); ``tokens_sent`` those in frames the server has handed to the socket (past
    uvicorn's flow control). They differ when the client reads slowly: generation goes on at
    the scenario's pace while sending waits (unless the scenario sets
    ``pause_on_backpressure``). ``state`` and ``completion_tokens`` follow generation: a record
    is ``completed`` once the last token is generated, even while frames still wait for a slow
    reader. ``tokens_after_disconnect`` counts tokens generated after the mock noticed the
    client had gone; it stays 0 when cancellation works, because generation is cancelled at
    once.

    ``queued_at`` is when the request started waiting for a slot (``None`` if it never
    waited), ``admitted_at`` when it got one (``started_at`` if it never waited, ``None`` if it
    never got one). ``content_encoding`` is how a unary answer's body was sent (``"gzip"``, or
    ``None`` for plain; streams are never compressed).

    ``background`` is true for a Responses request sent with ``"background": true``
    (:mod:`mock_upstream.background`): its generation does not depend on any reader, so a
    reader that leaves neither ends the record nor sets ``disconnected_at``; it stays
    ``running`` until the answer ends (``completed``, ``errored``), or ``cancelled`` by
    ``POST /v1/responses/{id}/cancel``. Its ``tokens_sent`` counts what every reader's socket
    took, so a token that a reader's socket took but the reader never read (it hung up), and
    that it read again on resuming, counts twice.
    """

    id: str
    api: Api
    stream: bool
    include_usage: bool
    prompt_tokens: int
    model: str = ""
    scenario: dict[str, Any] = field(default_factory=dict)
    background: bool = False
    state: State = "running"
    status_code: int = 200
    tokens_generated: int = 0
    tokens_sent: int = 0
    tokens_after_disconnect: int = 0
    completion_tokens: int = 0
    started_at: float = field(default_factory=time.time)
    first_token_at: float | None = None
    ended_at: float | None = None
    disconnected_at: float | None = None
    queued_at: float | None = None
    admitted_at: float | None = None
    content_encoding: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Metrics:
    """One set of the Prometheus series (replaced as a whole by :meth:`Recorder.reset`).

    The ``vllm:`` series of ``model`` exist from the start, at 0, as a vLLM engine exports its
    served model's before its first request."""

    def __init__(self, model: str) -> None:
        self.started = Counter(
            "mock_requests_started", "Requests the mock started answering.", registry=None
        )
        self.completed = Counter(
            "mock_requests_completed", "Answers that ended normally.", registry=None
        )
        self.cancelled = Counter(
            "mock_requests_cancelled",
            "Answers stopped because the client disconnected.",
            registry=None,
        )
        self.errored = Counter(
            "mock_requests_errored",
            "Answers that ended in an error status, in-stream error or dropped connection.",
            registry=None,
        )
        self.tokens = Counter(
            "mock_tokens_generated", "Completion tokens generated.", registry=None
        )
        self.sent = Counter(
            "mock_tokens_sent",
            "Completion tokens in frames handed to the client's socket.",
            registry=None,
        )
        self.tokens_after_disconnect = Counter(
            "mock_tokens_after_disconnect",
            "Completion tokens generated after the client disconnected.",
            registry=None,
        )
        self.ttft = Histogram(
            "mock_ttft_seconds",
            "Time from request to first token.",
            buckets=TTFT_BUCKETS,
            registry=None,
        )
        self.vllm_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed (as vLLM names it).",
            ["model_name"],
            registry=None,
        )
        self.vllm_ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds (as vLLM names it).",
            ["model_name"],
            buckets=TTFT_BUCKETS,
            registry=None,
        )
        self.vllm_success = Counter(
            "vllm:request_success",
            "Count of finished requests by finished_reason (as vLLM names it; abort: the "
            "client left).",
            ["finished_reason", "model_name"],
            registry=None,
        )
        self._by_model: dict[str, tuple[Counter, Histogram]] = {}
        self.for_model(model)
        for reason in FINISHED_REASONS:
            self.vllm_success.labels(reason, model)

    def for_model(self, model: str) -> tuple[Counter, Histogram]:
        """The ``vllm:`` token counter and TTFT histogram of one model (looked up once: the
        token counter is on the hot path, once per chunk)."""
        children = self._by_model.get(model)
        if children is None:
            children = self._by_model[model] = (
                self.vllm_tokens.labels(model),
                self.vllm_ttft.labels(model),
            )
        return children

    def collectors(self) -> tuple[Counter | Histogram, ...]:
        return (
            self.started,
            self.completed,
            self.cancelled,
            self.errored,
            self.tokens,
            self.sent,
            self.tokens_after_disconnect,
            self.ttft,
            self.vllm_tokens,
            self.vllm_ttft,
            self.vllm_success,
        )


class _Exporter(Collector):
    """Collects the recorder's current metrics, so the registry outlives a reset."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def collect(self) -> Iterable[Metric]:
        recorder = self._recorder
        running = GaugeMetricFamily("mock_requests_running", "Answers in progress (admitted).")
        running.add_metric([], recorder.running)
        yield running
        waiting = GaugeMetricFamily("mock_requests_waiting", "Requests waiting for a slot.")
        waiting.add_metric([], recorder.waiting)
        yield waiting
        per_model = GaugeMetricFamily(
            "vllm:num_requests_running",
            "Number of requests in model execution batches (as vLLM names it).",
            labels=["model_name"],
        )
        waiting_per_model = GaugeMetricFamily(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed (as vLLM names it).",
            labels=["model_name"],
        )
        queued = recorder.waiting_by_model()
        for model, count in sorted(recorder.running_by_model().items()):
            per_model.add_metric([model], count)
            waiting_per_model.add_metric([model], queued[model])
        yield per_model
        yield waiting_per_model
        for collector in recorder.metrics.collectors():
            yield from collector.collect()


class Recorder:
    """Records and metrics of one app; ``registry`` is its own Prometheus registry.

    ``model`` is the one whose ``vllm:`` series are exported from the start (and after a
    reset), before any request names it: the app gives its default model, the one a request
    that names none gets."""

    def __init__(self, *, model: str, max_records: int = MAX_RECORDS) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=max_records)
        self._running: dict[str, RequestRecord] = {}
        self._waiting: dict[str, RequestRecord] = {}
        self._on_finish: dict[str, Callable[[], None]] = {}
        self.model = model
        self._models: set[str] = {model}  # the default and every model asked for (vllm: gauges)
        self.metrics = Metrics(model)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Exporter(self))

    # -- reading ------------------------------------------------------------------------
    def records(self) -> list[RequestRecord]:
        """All kept records, oldest first."""
        return list(self._records)

    @property
    def running(self) -> int:
        """Requests admitted and not ended."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self._waiting)

    def running_by_model(self) -> dict[str, int]:
        """Answers in progress per model (0 for a model that has none now)."""
        return self._by_model(self._running)

    def waiting_by_model(self) -> dict[str, int]:
        """Requests queued for a slot per model (0 for a model that has none now)."""
        return self._by_model(self._waiting)

    def _by_model(self, active: dict[str, RequestRecord]) -> dict[str, int]:
        counts = dict.fromkeys(self._models, 0)
        for record in active.values():
            counts[record.model] += 1
        return counts

    def exposition(self) -> bytes:
        """The metrics in Prometheus text format."""
        return generate_latest(self.registry)

    def reset(self) -> None:
        """Forget finished records and zero the counters; running and queued requests stay
        counted."""
        active = {**self._running, **self._waiting}
        self._records = deque(
            (r for r in self._records if r.id in active), maxlen=self._records.maxlen
        )
        self._models = {self.model, *(r.model for r in active.values())}
        self.metrics = Metrics(self.model)

    # -- writing ------------------------------------------------------------------------
    def start(self, record: RequestRecord) -> RequestRecord:
        """A request arrived; it runs at once (admitted when it started) unless :meth:`queue`
        says otherwise."""
        record.state = "running"
        record.admitted_at = record.started_at
        self._records.append(record)
        self._running[record.id] = record
        self._models.add(record.model)
        self.metrics.started.inc()
        return record

    def queue(self, record: RequestRecord) -> None:
        """The request waits for a slot: ``queued`` from now, not admitted."""
        if self._running.pop(record.id, None) is None:
            return
        record.state = "queued"
        record.queued_at = time.time()
        record.admitted_at = None
        self._waiting[record.id] = record

    def admit(self, record: RequestRecord) -> None:
        """The queued request got its slot: ``running`` from now."""
        if self._waiting.pop(record.id, None) is None:
            return
        record.state = "running"
        record.admitted_at = time.time()
        self._running[record.id] = record

    def when_finished(self, record: RequestRecord, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when the record ends however it ends (at once if it has).
        A slot is given back so: when generation ends, not when the last frame is sent."""
        if record.state in ACTIVE:
            self._on_finish[record.id] = callback
        else:
            callback()

    def tokens(self, record: RequestRecord, count: int) -> None:
        """``count`` more completion tokens were generated."""
        now = time.time()
        tokens, ttft = self.metrics.for_model(record.model)
        if record.first_token_at is None:
            record.first_token_at = now
            self.metrics.ttft.observe(now - record.started_at)
            ttft.observe(now - record.started_at)
        record.tokens_generated += count
        self.metrics.tokens.inc(count)
        tokens.inc(count)
        if record.disconnected_at is not None:
            record.tokens_after_disconnect += count
            self.metrics.tokens_after_disconnect.inc(count)

    def sent(self, record: RequestRecord, count: int) -> None:
        """``count`` more completion tokens were handed to the client's socket."""
        record.tokens_sent += count
        self.metrics.sent.inc(count)

    def finish(
        self,
        record: RequestRecord,
        state: State,
        *,
        completion_tokens: int,
        finish_reason: str = "stop",
    ) -> None:
        """End the record (only the first call counts). ``finish_reason`` is how a completed
        answer ended (``length`` or ``stop``), for ``vllm:request_success_total``."""
        if record.state not in ACTIVE:
            return
        record.state = state
        record.completion_tokens = completion_tokens
        record.ended_at = time.time()
        self._running.pop(record.id, None)
        self._waiting.pop(record.id, None)
        if state != "errored":
            reason = "abort" if state == "cancelled" else finish_reason
            self.metrics.vllm_success.labels(reason, record.model).inc()
        counter = {
            "completed": self.metrics.completed,
            "cancelled": self.metrics.cancelled,
            "errored": self.metrics.errored,
        }[state]
        counter.inc()
        callback = self._on_finish.pop(record.id, None)
        if callback is not None:
            callback()

    def disconnected(self, record: RequestRecord) -> None:
        """The client went away: note the time and end the record as cancelled (a queued one
        too: it never runs)."""
        if record.state not in ACTIVE:
            return
        record.disconnected_at = time.time()
        self.finish(record, "cancelled", completion_tokens=record.tokens_generated)
