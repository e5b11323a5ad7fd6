"""Metrics of pipeline runs, for Prometheus (or anything that scrapes its text format, such as
the OpenTelemetry Collector's Prometheus receiver).

A :class:`RunMetrics` holds its own registry, so two in one process never mix and nothing is
registered process-wide; a run given one (``run_continuously(..., metrics=...)``) reports into
it, and :meth:`RunMetrics.serve` answers scrapes at ``http://<host>:<port>/metrics``.

What a run reports, each labelled with its ``pipeline``:

=========================================  ==========================================================
``lakestream_rows_in_total``               records read from the source (dead letters included)
``lakestream_rows_out_total``              rows the operators emitted to the sinks
``lakestream_dead_letters_total``          records set aside as dead letters
``lakestream_batches_total``               batches written, by ``mode`` (driver, distributed)
``lakestream_keys_touched_total``          distinct keys the batches' keyed operators saw, summed
``lakestream_batch_seconds``               histogram: a batch from its start until its output was written
``lakestream_checkpoint_seconds``          histogram: a checkpoint's commit
``lakestream_last_batch_id``               the last batch written
``lakestream_last_checkpoint_id``          the last checkpoint committed
``lakestream_source_lag``                  input not processed yet, by ``source`` and ``part`` (a Kafka
                                           partition's offsets, a Delta table's versions, files)
``lakestream_state_keys_held``             keys holding a value in the run's memory, by ``state`` (driver
                                           mode; a run reads only the keys its batches touch)
=========================================  ==========================================================

Source lag costs a request to the source (a Kafka broker's end offsets, a Delta log's listing),
so a run asks at most every ``lag_every_seconds``, when it plans (never while a batch's input is
being read), and never a source whose lag is a Spark job (files: its manifest is read whole).

>>> from ops.runtime.reports import BatchReport
>>> metrics = RunMetrics()
>>> metrics.batch("prices", BatchReport(1, rows_in=10, rows_out=8, dead_letters=2, keys=3,
...                                     seconds=0.25, replayed=False))
>>> metrics.value("lakestream_rows_in_total", pipeline="prices")
10.0
>>> b"lakestream_dead_letters_total" in metrics.exposition()
True
>>> import urllib.request
>>> with metrics.serving(port=0) as endpoint:  # a free port on 127.0.0.1
...     scraped = urllib.request.urlopen(endpoint.url).read()
>>> b'lakestream_rows_out_total{pipeline="prices"} 8.0' in scraped
True
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from threading import Thread
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from .reports import BatchReport

log = logging.getLogger(__name__)

# a batch of a few rows takes hundredths of a second, a large one tens of seconds
_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass(frozen=True)
class MetricsEndpoint:
    """An HTTP server answering scrapes of one registry at ``url`` until :meth:`stop`."""

    host: str
    port: int
    _server: Any
    _thread: Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class RunMetrics:
    """What pipeline runs did, as Prometheus metrics in a registry of their own (see the
    module's table). One may serve several pipelines' runs: each series carries ``pipeline``."""

    def __init__(self, lag_every_seconds: float = 5.0):
        self.registry = CollectorRegistry()
        self.lag_every_seconds = lag_every_seconds
        self._lag_asked: dict[str, float] = {}
        self._states: dict[str, set[str]] = {}  # per pipeline, the states it has series of
        by_pipeline = ("pipeline",)

        def counter(name: str, text: str, labels: tuple[str, ...] = by_pipeline) -> Counter:
            return Counter(name, text, labels, registry=self.registry)

        def gauge(name: str, text: str, labels: tuple[str, ...] = by_pipeline) -> Gauge:
            return Gauge(name, text, labels, registry=self.registry)

        def histogram(name: str, text: str) -> Histogram:
            return Histogram(name, text, by_pipeline, registry=self.registry, buckets=_SECONDS)

        self._rows_in = counter("lakestream_rows_in", "Records read from the source, dead letters included")
        self._rows_out = counter("lakestream_rows_out", "Rows the operators emitted to the sinks")
        self._dead_letters = counter("lakestream_dead_letters", "Records set aside as dead letters")
        self._batches = counter("lakestream_batches", "Batches written", ("pipeline", "mode"))
        self._keys_touched = counter("lakestream_keys_touched",
                                     "Distinct keys each batch's keyed operators saw, summed")
        self._batch_seconds = histogram("lakestream_batch_seconds",
                                        "A batch from its start until its output was written")
        self._checkpoint_seconds = histogram("lakestream_checkpoint_seconds", "A checkpoint's commit")
        self._last_batch = gauge("lakestream_last_batch_id", "The last batch written")
        self._last_checkpoint = gauge("lakestream_last_checkpoint_id", "The last checkpoint committed")
        self._lag = gauge("lakestream_source_lag",
                          "Input not processed yet per source part (offsets, versions or files)",
                          ("pipeline", "source", "part"))
        self._keys_held = gauge("lakestream_state_keys_held",
                                "Keys holding a value in the run's memory (driver mode)",
                                ("pipeline", "state"))

    # what a run reports ---------------------------------------------------------------------
    def batch(self, pipeline: str, batch: BatchReport) -> None:
        """A batch whose output was written."""
        self._rows_in.labels(pipeline).inc(batch.rows_in)
        self._rows_out.labels(pipeline).inc(batch.rows_out)
        self._dead_letters.labels(pipeline).inc(batch.dead_letters)
        self._keys_touched.labels(pipeline).inc(batch.keys)
        self._batches.labels(pipeline, batch.mode).inc()
        self._batch_seconds.labels(pipeline).observe(batch.seconds)
        self._last_batch.labels(pipeline).set(batch.batch_id)

    def checkpoint(self, pipeline: str, checkpoint_id: int, seconds: float) -> None:
        """A checkpoint committed in ``seconds``."""
        self._checkpoint_seconds.labels(pipeline).observe(seconds)
        self._last_checkpoint.labels(pipeline).set(checkpoint_id)

    def take_lag_turn(self, pipeline: str) -> bool:
        """Whether ``pipeline``'s source lag is to be asked now; ``True`` starts the next wait."""
        now = time.monotonic()
        if now - self._lag_asked.get(pipeline, float("-inf")) < self.lag_every_seconds:
            return False
        self._lag_asked[pipeline] = now
        return True

    def source_lag(self, pipeline: str, source: str, by_part: Mapping[str, int]) -> None:
        for part, lag in by_part.items():
            self._lag.labels(pipeline, source, part).set(lag)

    def state_keys_held(self, pipeline: str, by_state: Mapping[str, int]) -> None:
        for state, keys in by_state.items():
            self._keys_held.labels(pipeline, state).set(keys)
        self._states.setdefault(pipeline, set()).update(by_state)

    def forget_state_keys(self, pipeline: str) -> None:
        """Drop ``pipeline``'s keys-held series: a new run holds none yet, and a run on
        executors holds none on the driver (an earlier value would stay on show)."""
        for state in self._states.pop(pipeline, ()):
            self._keys_held.remove(pipeline, state)

    # reading and serving ----------------------------------------------------------------------
    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (``None``: no such series yet); for tests and scripts."""
        return self.registry.get_sample_value(name, labels)

    def exposition(self) -> bytes:
        """Every series in Prometheus's text format, as a scrape gets it."""
        return generate_latest(self.registry)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> MetricsEndpoint:
        """Answer scrapes at ``http://host:port/metrics`` from a daemon thread (``port=0``: a
        free one; the endpoint's ``url`` tells which) until the endpoint's ``stop()``."""
        return serve_registry(self.registry, port, host)

    @contextmanager
    def serving(self, port: int = 0, host: str = "127.0.0.1") -> Iterator[MetricsEndpoint]:
        """:meth:`serve` for the length of a ``with`` block."""
        endpoint = self.serve(port, host)
        log.info("metrics at %s", endpoint.url)
        try:
            yield endpoint
        finally:
            endpoint.stop()


def serve_registry(registry: CollectorRegistry, port: int = 0, host: str = "127.0.0.1") -> MetricsEndpoint:
    """A scrape endpoint for ``registry`` (see :meth:`RunMetrics.serve`)."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsEndpoint(host, int(server.server_port), server, thread)
