"""``.write.to_*(...)``: the pipeline builder's sinks, each added by the :class:`Writer` that
``stream.write`` and ``pipeline.write`` hand back (definition only, checked at once, as in
:mod:`ops.pipeline`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from state import check_name

from .errors import PipelineDefinitionError
from .kafka_client import DEFAULT_TIMEOUT, connection
from .kafka_client.registry import REGISTRY_FORMATS, SchemaRegistry, registry_of
from .sinks import ConsoleSink, DeltaSink, KafkaSink, Sink, TableSink

if TYPE_CHECKING:  # the pipeline holds its writer's module, not the other way round
    from .pipeline import Pipeline


@dataclass(frozen=True)
class Writer:
    """Adds a sink and yields the pipeline."""

    pipeline: Pipeline

    def to_console(self) -> Pipeline:
        """Print each batch (a replay prints again)."""
        return self._with(ConsoleSink())

    def to_delta(self, name: str, path: str | None = None) -> Pipeline:
        """Append to the Delta table ``<warehouse>/<pipeline>/<name>`` (or ``path``)."""
        check_name("sink", name)
        return self._with(DeltaSink(name=name, path=path))

    def to_table(self, name: str) -> Pipeline:
        """Materialise an aggregation as a state table ``<warehouse>/<pipeline>/<name>`` (latest
        value per key) with its changelog ``<name>_changelog``."""
        check_name("table", name)
        operators = self.pipeline.stream.operators
        keys = operators[-1].table_keys if operators else None
        if keys is None:
            raise PipelineDefinitionError("to_table needs an aggregation right before it: "
                                          "stream.group_by(...).agg(...).write.to_table(name)")
        coalesced = all(op.one_change_per_key for op in operators)
        return self._with(TableSink(name=name, keys=keys, coalesced=coalesced))

    def to_kafka(self, topic: str, *, bootstrap: str, key: str | None = None,
                 value_format: str = "json", delivery: str = "exactly_once",
                 options: Mapping[str, str] | None = None, name: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, registry: SchemaRegistry | str | None = None,
                 register: bool = True) -> Pipeline:
        """Send each batch's rows to Kafka ``topic``: exactly once by default (one transaction
        per batch, committed before the checkpoint; a replay sends nothing twice), or
        ``delivery="at_least_once"`` through Spark's Kafka writer. Values are the rows as JSON
        objects (``value_format="string"``: column ``value``), or records of a schema
        registry's format (``"avro"``, ``"protobuf"``, ``"json_schema"``) with ``registry``:
        their schema is made from the columns and registered under ``<topic>-value``
        (``register=False``: it must be registered already). ``key`` names the key column.
        Consumers must read with ``isolation.level=read_committed`` to see each row once."""
        sink_name = name or f"kafka_{topic}".replace(".", "_").replace("-", "_")
        check_name("sink", sink_name)
        if registry is not None or value_format in REGISTRY_FORMATS:
            registry = registry_of(registry, f"sink {sink_name!r}", value_format)
        return self._with(KafkaSink(name=sink_name, topic=topic,
                                    connection=connection(bootstrap, options, timeout), key=key,
                                    value_format=value_format, delivery=delivery,
                                    registry=registry, register=register))

    def _with(self, sink: Sink) -> Pipeline:
        if any(existing.name == sink.name for existing in self.pipeline.sinks):
            raise PipelineDefinitionError(f"sink name {sink.name!r} is used twice")
        return dataclasses.replace(self.pipeline, sinks=self.pipeline.sinks + (sink,))
