"""``sp.read``: the source constructors, KX-style (``sp.read.from_callback(...)``), each returning
a :class:`~ops.pipeline.Stream` to build on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .columns import KAFKA_KEY
from .errors import PipelineDefinitionError
from .kafka_client import DEFAULT_TIMEOUT, connection, part_id
from .kafka_client.registry import REGISTRY_FORMATS, SchemaRegistry, registry_of
from .kafka_client.serde import reader_schema
from .pipeline import Stream
from .sources import CallbackSource, DeltaTableSource, FileSource, KafkaSource, RecordSchema, kafka_schema


class Readers:
    """``sp.read``: the source constructors, KX-style (``sp.read.from_callback(...)``)."""

    @staticmethod
    def from_callback(name: str, key: str | tuple[str, ...] | None = None,
                      schema: Mapping[str, str] | None = None,
                      max_versions: int | None = None) -> Stream:
        """A stream of records published with ``pipeline.publish(...)``.

        ``key`` names the field (or fields) that key the stream; ``schema`` maps field names to
        ``long``/``double``/``string``/``boolean``/``timestamp`` and is checked on every record.
        """
        source = CallbackSource(name=name, schema=RecordSchema(dict(schema or {}), key),
                                max_versions=max_versions)
        return Stream(source=source)

    @staticmethod
    def from_delta(path: str, key: str | tuple[str, ...] | None = None, *, name: str = "delta",
                   order_by: tuple[str, ...] = (), max_versions: int | None = None,
                   schema: Mapping[str, str] | None = None) -> Stream:
        """A stream of the rows appended to the Delta table at ``path`` (change data feed on),
        in the table's order (commit, the order it added its files, place in the file), or by
        version then ``order_by`` when given. Its columns' types are the table's; ``schema``
        (column -> ``long``, ``timestamp``…) declares them before the table exists."""
        source = DeltaTableSource(name=name, path=path, schema=RecordSchema(dict(schema or {}), key),
                                  order_by=tuple(order_by), max_versions=max_versions)
        return Stream(source=source)

    @staticmethod
    def from_files(directory: str, format: str, key: str | tuple[str, ...] | None = None,  # noqa: A002
                   schema: Mapping[str, str] | None = None, *, name: str = "files",
                   max_files: int | None = None, options: Mapping[str, str] | None = None) -> Stream:
        """A stream of the records in files landing in ``directory`` (``json``, ``csv`` with a
        header row, or ``parquet``); each file is processed exactly once, oldest first.

        ``schema`` is required for JSON and CSV; records that do not match it, and records with
        a null key, go to dead letters with ``file:line`` as their position.
        """
        source = FileSource(name=name, directory=directory, format=format,
                            schema=RecordSchema(dict(schema or {}), key), max_files=max_files,
                            options=tuple(sorted((options or {}).items())))
        return Stream(source=source)

    @staticmethod
    def from_kafka(topics: str | Sequence[str], *, bootstrap: str,
                   key: str | tuple[str, ...] | None = KAFKA_KEY, value_format: str = "json",
                   schema: Mapping[str, str] | None = None,
                   starting: str | Mapping[Any, int] = "earliest", max_records: int | None = None,
                   on_missing: str = "fail", options: Mapping[str, str] | None = None,
                   name: str = "kafka", timeout: float = DEFAULT_TIMEOUT,
                   registry: SchemaRegistry | str | None = None) -> Stream:
        """A stream of the records of Kafka ``topics`` (one name or several), read committed.

        ``value_format``: ``"json"`` (an object per record, checked against ``schema``, which
        it needs), ``"string"`` (the text in column ``value``), or a schema registry's format,
        ``"avro"``, ``"protobuf"`` or ``"json_schema"``, with ``registry`` (a URL or an
        :class:`~ops.kafka_client.registry.SchemaRegistry`): each record is decoded with its
        writer's schema, and without ``schema`` the columns are those of the first topic's
        subject's latest schema (see :mod:`ops.kafka_client.serde`). Rows also carry ``_key``,
        ``_topic``, ``_partition``, ``_offset`` and ``_timestamp``; ``key`` keys the stream
        (the record key by default; ``None``: unkeyed; or value fields). ``starting``:
        ``"earliest"``, ``"latest"`` or offsets by partition (``{0: 42}`` for one topic, else
        ``{"orders:0": 42}``). ``max_records`` bounds a batch; ``on_missing="skip"`` reads on
        past offsets deleted by retention (recorded in dead letters). ``options`` go to the
        Kafka clients as they are (``security.protocol``, ``sasl.*``…).

        >>> stream = sp.read.from_kafka("orders", bootstrap="127.0.0.1:9092",   # doctest: +SKIP
        ...                             schema={"item": "string", "qty": "long"})
        """
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        reader = None
        if registry is not None or value_format in REGISTRY_FORMATS:
            registry = registry_of(registry, f"source {name!r}", value_format)
        if registry is not None and value_format in REGISTRY_FORMATS:
            schema = dict(schema) if schema else registry.fields(names[0], value_format)
            reader = reader_schema(registry, value_format, names)
        if value_format == "json" and not schema:
            raise PipelineDefinitionError(
                f"source {name!r}: value_format='json' needs a schema (field -> type), so every "
                "batch has the same columns on the driver and on executors; use "
                "value_format='string' to take the text as it is")
        source = KafkaSource(name=name, topics=names, connection=connection(bootstrap, options, timeout),
                             schema=kafka_schema(schema, value_format, key), value_format=value_format,
                             starting=_starting_offsets(starting, names, name),
                             max_records=max_records, on_missing=on_missing,
                             registry=registry, reader=reader)
        return Stream(source=source)


def _starting_offsets(starting: str | Mapping[Any, int], topics: tuple[str, ...],
                      name: str) -> str | tuple[tuple[str, int], ...]:
    """``starting`` as the source keeps it: a word, or sorted ``("<topic>:<partition>", offset)``."""
    if isinstance(starting, str):
        return starting
    offsets = []
    for part, offset in starting.items():
        if isinstance(part, int) and len(topics) == 1:
            part = part_id(topics[0], part)
        topic, _, partition = str(part).rpartition(":")
        if topic not in topics or not partition.isdigit() or not isinstance(offset, int) or offset < 0:
            raise PipelineDefinitionError(
                f"source {name!r}: starting offset {part!r}: {offset!r} is not "
                "'<topic>:<partition>': offset >= 0 for one of its topics (a bare partition "
                "number is enough with one topic)")
        offsets.append((str(part), offset))
    return tuple(sorted(offsets))


#: ``sp.read``
read = Readers()
