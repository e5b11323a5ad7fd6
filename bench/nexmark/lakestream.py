"""A Nexmark query run by lakestream: the generated Delta tables registered as ``person``,
``auction`` and ``bid`` (event time ``dateTime``) and ``side_input`` (a table keyed by
``key``), each of the query's statements compiled against them in order and run to the end of
the input, and the answer read back.

>>> from bench.nexmark.queries import query
>>> [name for name, _ in sources("/data/nexmark")]
['person', 'auction', 'bid', 'side_input']
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

import ops as sp
from bench.nexmark import python_forms
from bench.nexmark.queries import Query
from bench.nexmark.streams import KINDS, StreamPaths, record_schema

#: columns a sink adds to a stream's rows, which no other engine has
_BOOKKEEPING = ("_batch_id", "_row")


@dataclass(frozen=True)
class Answer:
    """A query's answer (``rows``) and the seconds its run took (``seconds``: every statement's
    ``run_once``, planning and checkpoints included)."""

    rows: pd.DataFrame
    seconds: float


def sources(folder: str, max_versions: int | None = None) -> Iterator[tuple[str, sp.Stream]]:
    """The generated stream's tables as lakestream streams, by name (``max_versions``: how many
    of a table's commits one batch reads; ``None``: every commit there is)."""
    paths = StreamPaths(folder)
    for kind in KINDS:
        yield kind, sp.read.from_delta(paths.delta(kind), name=kind, order_by=("event_id",),
                                       max_versions=max_versions)
    yield "side_input", sp.read.from_delta(paths.delta("side_input"), name="side_input")


def kafka_sources(folder: str, bootstrap: str, topics: dict[str, str]
                  ) -> Iterator[tuple[str, sp.Stream]]:
    """The stream's kinds read from their Kafka topics (:func:`~bench.nexmark.streams.
    write_topics`), unkeyed, as JSON of :func:`~bench.nexmark.streams.record_schema`; the side
    input from its Delta table in ``folder``."""
    for kind in KINDS:
        yield kind, sp.read.from_kafka(topics[kind], bootstrap=bootstrap, key=None, name=kind,
                                       schema=record_schema(kind))
    yield "side_input", sp.read.from_delta(StreamPaths(folder).delta("side_input"),
                                           name="side_input")


def catalog(folder: str, max_versions: int | None = None,
            streams: Iterator[tuple[str, sp.Stream]] | None = None) -> sp.Catalog:
    """A catalog of the generated stream: ``streams``, or the Delta tables (:func:`sources`)."""
    found = sp.Catalog()
    for name, stream in streams or sources(folder, max_versions):
        if name == "side_input":
            found.register(name, stream, primary_key="key")
        else:
            found.register(name, stream, timestamp="dateTime")
    return found


def run(spark, query: Query, folder: str, warehouse: str, mode: str = "driver",
        max_versions: int | None = None, names: sp.Catalog | None = None) -> Answer:
    """``query`` run over the stream in ``folder`` (or ``names``, a catalog of it) in ``mode``,
    each statement to the end of its input in order; its answer without the sink's
    bookkeeping columns."""
    names = names or catalog(folder, max_versions)
    if query.python is not None:
        stream = python_forms.Stream(folder, names, warehouse, max_versions)
        pipelines = [pipeline.with_mode(mode) for pipeline in query.python(stream)]
    else:
        pipelines = [sp.sql(statement, catalog=names, warehouse=warehouse).with_mode(mode)
                     for statement in query.statements]
    started = time.perf_counter()
    for pipeline in pipelines:
        pipeline.run_once(spark, warehouse)
    seconds = time.perf_counter() - started
    rows = pipelines[-1].read_sink(spark, query.result, warehouse)
    return Answer(rows.drop(columns=[c for c in _BOOKKEEPING if c in rows.columns]), seconds)
