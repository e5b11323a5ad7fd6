"""The query server's metrics, for Prometheus: ``GET /metrics`` on the server itself.

Counted as they happen: ``lakestream_analytics_subscribes_total`` (handles given out),
``lakestream_analytics_deliveries_total`` (events sent on streams, by ``kind``: snapshot or
delta) and ``lakestream_analytics_released_total`` (handles let go, by ``why``: unsubscribed,
expired, not_reconnected, dropped), ``lakestream_analytics_bodies_refused_total`` (request bodies
answered 413) and ``lakestream_analytics_refused_body_bytes_total`` (what the server read of
those, to throw it away: see :mod:`.bodies`). Read at each scrape: ``lakestream_analytics_handles``,
``lakestream_analytics_streams_open``, ``lakestream_analytics_subscriptions`` (shared ones count
once) and ``lakestream_analytics_published_batch`` (by ``target``: the last batch whose deltas
went out).

>>> metrics = ServerMetrics(lambda: Census(handles=2, streams_open=1, subscriptions=1,
...                                         published={"servers": 7}))
>>> metrics.delivered("delta")
>>> metrics.registry.get_sample_value("lakestream_analytics_deliveries_total", {"kind": "delta"})
1.0
>>> metrics.registry.get_sample_value("lakestream_analytics_published_batch", {"target": "servers"})
7.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Why the server lets a handle go (the values of the ``why`` label).
RELEASE_REASONS = ("unsubscribed", "expired", "not_reconnected", "dropped")


@dataclass(frozen=True)
class Census:
    """What the server holds at one moment."""

    handles: int
    streams_open: int
    subscriptions: int
    published: Mapping[str, int]


class _Held(Collector):
    """Gauges read from a :class:`Census` at each scrape (nothing to keep in step)."""

    def __init__(self, census: Callable[[], Census]):
        self._census = census

    def collect(self) -> Iterator[Metric]:
        now = self._census()
        yield GaugeMetricFamily("lakestream_analytics_handles", "Subscription handles held",
                                value=now.handles)
        yield GaugeMetricFamily("lakestream_analytics_streams_open", "Event streams open",
                                value=now.streams_open)
        yield GaugeMetricFamily("lakestream_analytics_subscriptions",
                                "Live subscriptions (identical ones shared)", value=now.subscriptions)
        published = GaugeMetricFamily("lakestream_analytics_published_batch",
                                      "The last batch whose deltas were published", labels=["target"])
        for target, batch in sorted(now.published.items()):
            published.add_metric([target], float(batch))
        yield published


class ServerMetrics:
    """The query server's metrics, in a registry of their own; ``census`` tells what the
    server holds when a scrape asks."""

    def __init__(self, census: Callable[[], Census]):
        self.registry = CollectorRegistry()
        self.registry.register(_Held(census))
        self._subscribes = Counter("lakestream_analytics_subscribes", "Handles given out",
                                   registry=self.registry)
        self._deliveries = Counter("lakestream_analytics_deliveries", "Events sent on streams",
                                   ["kind"], registry=self.registry)
        self._released = Counter("lakestream_analytics_released", "Handles the server let go",
                                 ["why"], registry=self.registry)
        self._refused = Counter("lakestream_analytics_bodies_refused",
                                "Request bodies refused as too large (413)", registry=self.registry)
        self._refused_bytes = Counter("lakestream_analytics_refused_body_bytes",
                                      "Bytes the server read of refused request bodies (thrown away)",
                                      registry=self.registry)

    def subscribed(self) -> None:
        self._subscribes.inc()

    def delivered(self, kind: str) -> None:
        self._deliveries.labels(kind).inc()

    def refused_body(self, read: int) -> None:
        """A request body was refused, of which the server read ``read`` bytes."""
        self._refused.inc()
        self._refused_bytes.inc(read)

    def released(self, why: str) -> None:
        if why not in RELEASE_REASONS:  # a fixed set: a label is a series each
            raise ValueError(f"why must be one of {RELEASE_REASONS}, got {why!r}")
        self._released.labels(why).inc()
