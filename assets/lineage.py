"""Lineage: which assets a pipeline's sinks are, and which of them another pipeline reads.

A pipeline reads another's output when one of its inputs (a Delta source, a part of a merged
source, a table it joins, a Kafka topic) is where the other pipeline's sink writes: a state
table or its changelog, a plain Delta sink, a Kafka sink's topic on the same brokers. Inputs
and outputs are compared as locations (normalised paths, ``kafka://<brokers>/<topic>``), which is
all a pipeline definition says about them.
"""

import os
from collections.abc import Iterable, Sequence

import dagster as dg

from ops import DeltaSink, DeltaTableSource, KafkaSink, KafkaSource, Pipeline, Sink, TableJoin, TableSink
from state import resolve_warehouse

ASSET_SINKS = (TableSink, DeltaSink, KafkaSink)  # the console prints: nothing to track


def sink_key(pipeline: Pipeline, sink: Sink) -> dg.AssetKey:
    """``<pipeline>/<sink>``: the asset a sink's output is.

    >>> import ops as sp
    >>> p = sp.read.from_callback("in", schema={"x": "long"}).write.to_delta("out").named("p")
    >>> sink_key(p, p.sink("out")).to_user_string()
    'p/out'
    """
    return dg.AssetKey([pipeline.id, sink.name])


def asset_sinks(pipeline: Pipeline) -> list[Sink]:
    """The sinks of ``pipeline`` that are assets of their own (every sink but the console)."""
    return [sink for sink in pipeline.sinks if isinstance(sink, ASSET_SINKS)]


def output_keys(pipeline: Pipeline, warehouse: str | None = None) -> dict[str, dg.AssetKey]:
    """Where each of ``pipeline``'s sink assets writes (a state table's changelog too), by
    location, under ``warehouse`` (default: the configured one, as the resources see it)."""
    layout = pipeline.layout(resolve_warehouse(warehouse))
    outputs: dict[str, dg.AssetKey] = {}
    for sink in asset_sinks(pipeline):
        if isinstance(sink, KafkaSink):
            locations = [_topic(sink.connection.bootstrap, sink.topic)]
        else:
            assert isinstance(sink, (TableSink, DeltaSink))  # the stored ones
            locations = [_path(path) for path in sink.tables(layout)]
        outputs.update(dict.fromkeys(locations, sink_key(pipeline, sink)))
    return outputs


def input_locations(pipeline: Pipeline) -> set[str]:
    """Every location ``pipeline`` reads that another pipeline might write: Delta tables (its
    source's, a merged source's parts', tables it joins) and Kafka topics. Inboxes and landing
    folders are its own or the outside world's, never another pipeline's."""
    found: set[str] = set()
    for part in pipeline.source.parts:
        if isinstance(part, DeltaTableSource):
            found.add(_path(part.path))
        elif isinstance(part, KafkaSource):
            found.update(_topic(part.connection.bootstrap, topic) for topic in part.topics)
    found.update(_path(op.path) for op in pipeline.stream.operators if isinstance(op, TableJoin))
    return found


def upstream_keys(pipeline: Pipeline, pipelines: Iterable[Pipeline],
                  warehouse: str | None = None) -> list[dg.AssetKey]:
    """The sink assets of ``pipelines`` that ``pipeline`` reads (tables over tables), sorted.

    >>> import ops as sp
    >>> catalog = sp.Catalog()
    >>> catalog.register("sales", sp.read.from_callback("sales", schema={"title": "string"}))
    >>> sold = sp.sql("CREATE TABLE sold AS SELECT title, COUNT(*) AS n FROM sales GROUP BY title",
    ...               catalog=catalog)
    >>> top = sp.sql("CREATE TABLE top AS SELECT n, COUNT(*) AS titles FROM sold GROUP BY n",
    ...              catalog=catalog)
    >>> [key.to_user_string() for key in upstream_keys(top, [sold, top])]
    ['sold/sold']
    """
    written = _written_by_others(pipeline, pipelines, warehouse)
    return sorted({written[place] for place in input_locations(pipeline) if place in written},
                  key=lambda key: key.to_user_string())


def external_inputs(pipeline: Pipeline, pipelines: Iterable[Pipeline],
                    warehouse: str | None = None) -> bool:
    """Whether ``pipeline`` reads anything no pipeline of ``pipelines`` writes: an inbox, files,
    a topic or table from outside. Only such input needs a sensor; input that another pipeline's
    asset writes is seen by Dagster's declarative automation."""
    if not all(isinstance(part, (DeltaTableSource, KafkaSource)) for part in pipeline.source.parts):
        return True
    written = _written_by_others(pipeline, pipelines, warehouse)
    return not input_locations(pipeline) <= written.keys()


def _written_by_others(pipeline: Pipeline, pipelines: Iterable[Pipeline],
                       warehouse: str | None) -> dict[str, dg.AssetKey]:
    written: dict[str, dg.AssetKey] = {}
    for other in pipelines:
        if other.id != pipeline.id:
            written.update(output_keys(other, warehouse))
    return written


def _path(path: str) -> str:
    """A table location compared by value: URIs without a trailing slash, local paths absolute."""
    if path.startswith("file:"):
        path = path.removeprefix("file:").removeprefix("//")
    if "://" in path:
        return path.rstrip("/")
    return os.path.normpath(os.path.abspath(path))


def _topic(bootstrap: str, topic: str) -> str:
    brokers: Sequence[str] = sorted(server.strip() for server in bootstrap.split(","))
    return f"kafka://{','.join(brokers)}/{topic}"
