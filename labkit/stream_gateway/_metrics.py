"""The gateway's Prometheus metrics, in a registry of its own (one per app, never the
process's global one: two gateways in one notebook count apart).

``gateway_ttft_seconds`` is the time from a request's arrival to the first upstream content;
``gateway_first_useful_content_seconds`` to the first released fragment that says something
(``labkit.wire.says_something``). The distance between the two is what a release policy costs
the reader. ``gateway_streams`` counts answers by how they ended.
"""

from __future__ import annotations

from typing import ClassVar, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

_BUCKETS: Final = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)


class GatewayMetrics:
    """The gateway's Prometheus metrics, in a registry of its own."""

    media_type: ClassVar[str] = CONTENT_TYPE_LATEST  #: of :meth:`exposition`'s page

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ttft = Histogram(
            "gateway_ttft_seconds",
            "Request arrival to the first upstream content chunk.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.first_useful = Histogram(
            "gateway_first_useful_content_seconds",
            "Request arrival to the first released fragment that says something.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.streams = Counter(
            "gateway_streams", "Streams by outcome.", ["outcome"], registry=self.registry
        )

    def exposition(self) -> bytes:
        """The ``/metrics`` page: every metric in Prometheus's text format."""
        return generate_latest(self.registry)
