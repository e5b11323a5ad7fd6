"""``sp.read.from_kafka(topics, bootstrap=…)``: the records of Kafka topics, by partition offset.

A batch's plan records, for every partition, the offsets it starts and ends at, taken from the
**read-committed** end (the last stable offset): records of transactions still open or aborted
are never planned or read, and a replay reads exactly the planned offsets. Partitions added to a
topic are picked up at the next plan, from their first offset. A batch's rows are in topic,
partition, offset order.

Each record becomes a row: the value's fields (``value_format="json"``: a JSON object checked
against ``schema``; ``"string"``: the UTF-8 text in ``value``; ``"avro"``, ``"protobuf"``,
``"json_schema"``: a schema registry's record, decoded with its writer's schema, see
:mod:`ops.kafka_client.serde`) plus ``_key``, ``_topic``,
``_partition``, ``_offset`` and ``_timestamp``. ``_key`` keys the stream by default, as the
message key keys KX's state. A record that does not decode or check goes to dead letters with
``topic:partition@offset`` as its position.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from state import PipelineLayout
from state.lake import tables

from ..columns import FIRST_ORDINAL, KAFKA_COLUMNS, KAFKA_KEY, ORDER_COLUMN
from ..context import RunContext
from ..errors import PipelineDefinitionError, SourceError
from ..kafka_client import KafkaConnection, parse_part, part_id
from ..kafka_client.registry import REGISTRY_FORMATS, SchemaRegistry
from ..kafka_client.serde import RegistryDecoder
from .base import REJECTED_COLUMNS, FrameSlice, Slice, Source
from .kafka_decoding import KafkaRecordDecoder, SparkDecoder
from .records import RecordSchema

log = logging.getLogger(__name__)

VALUE_FORMATS = ("json", "string", *REGISTRY_FORMATS)
STARTS = ("earliest", "latest")
#: A driver-mode batch this large is read by Spark's Kafka source (executors in parallel)
#: and brought to the driver through Arrow, instead of through one Python consumer.
SPARK_READ_FROM = 500_000
Positions = dict[str, int]


def metadata_fields() -> dict[str, str]:
    """The types of the columns every Kafka row carries besides its value's fields."""
    return {KAFKA_KEY: "string", "_topic": "string", "_partition": "long", "_offset": "long",
            "_timestamp": "timestamp"}


@dataclass(frozen=True)
class KafkaSource(Source):
    """Kafka topics read by partition offsets; see the module's docstring for the rules.

    ``starting`` is where a new pipeline starts: ``"earliest"``, ``"latest"`` (the first batch
    then reads nothing and records where it stands), or explicit offsets per partition
    (``(("orders:0", 42), …)``; partitions not named start at their earliest). ``max_records``
    bounds a batch's offsets over all partitions. ``on_missing``: what to do when planned
    offsets were deleted (retention) before they were read: ``"fail"`` (the default: an error
    naming them), or ``"skip"``, which reads on from the first offset kept and writes the lost
    range to dead letters, so the gap is recorded, never silent.
    """

    name: str
    topics: tuple[str, ...]
    connection: KafkaConnection
    schema: RecordSchema
    value_format: str = "json"
    starting: str | tuple[tuple[str, int], ...] = "earliest"
    max_records: int | None = None
    on_missing: str = "fail"
    #: the schema registry of a registry format's records
    registry: SchemaRegistry | None = None
    #: the registry schema records are read through (see ``serde.reader_schema``)
    reader: Any = field(default=None, repr=False, compare=False)
    #: decodes and checks this source's records; made from ``schema``, ``value_format`` and
    #: the registry, so it takes no part in the source's equality or repr
    decoder: KafkaRecordDecoder = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"source {self.name!r}"
        if self.value_format not in VALUE_FORMATS:
            raise PipelineDefinitionError(
                f"{where}: value_format {self.value_format!r} is not one of {VALUE_FORMATS}")
        if (self.value_format in REGISTRY_FORMATS) != (self.registry is not None):
            raise PipelineDefinitionError(
                f"{where}: a schema registry goes with value_format one of {REGISTRY_FORMATS}, "
                f"and only with those (value_format={self.value_format!r})")
        values = None if self.registry is None else RegistryDecoder(self.registry, self.value_format,
                                                                    self.reader)
        object.__setattr__(self, "decoder", KafkaRecordDecoder(self.schema, self.value_format, values))
        if not self.topics or not all(isinstance(t, str) and t and ":" not in t for t in self.topics):
            raise PipelineDefinitionError(f"{where}: topics must be non-empty names, got {self.topics!r}")
        if isinstance(self.starting, str) and self.starting not in STARTS:
            raise PipelineDefinitionError(
                f"{where}: starting {self.starting!r} is not 'earliest', 'latest' or offsets by "
                "partition ({'<topic>:<partition>': offset} or {partition: offset})")
        if self.max_records is not None and self.max_records < 1:
            raise PipelineDefinitionError(f"{where}: max_records must be at least 1")
        if self.on_missing not in ("fail", "skip"):
            raise PipelineDefinitionError(f"{where}: on_missing must be 'fail' or 'skip'")

    # planning ---------------------------------------------------------------------------------
    def setup(self, ctx: RunContext) -> None:
        """Nothing to create: the topics are the user's (they must exist when a batch is planned)."""

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        parts = self.connection.partitions(self.topics)
        ends = self.connection.offsets(parts, "latest")
        if after is None and self.starting == "latest":
            return [(ends, ends)]  # a first batch of nothing, so the starting point is recorded
        start = self._start(parts, after)
        self._check_not_behind(start, ends)
        if self.on_missing == "fail":
            self._check_kept(start, ends)
        slices: list[tuple[Any, Any]] = []
        while len(slices) < limit and any(ends[p] > start[p] for p in parts):
            end = self._bounded(start, ends)
            slices.append((start, end))
            start = end
        return slices

    def _start(self, parts: list[str], after: Positions | None) -> Positions:
        """Where each partition's next batch starts: recorded positions, else the starting
        point; partitions new since then start at their earliest offset."""
        known = dict(after or {})
        if after is None and not isinstance(self.starting, str):
            known = dict(self.starting)
        missing = [p for p in parts if p not in known]
        earliest = self.connection.offsets(missing, "earliest") if missing else {}
        return {p: int(known.get(p, earliest.get(p, 0))) for p in parts}

    def _check_not_behind(self, start: Positions, ends: Positions) -> None:
        """A partition whose end is before the position already read was deleted and created
        again (or truncated): its new records would never be read, so say so."""
        behind = {p: (start[p], ends[p]) for p in start if ends[p] < start[p]}
        if behind:
            shown = "; ".join(f"{p} ends at {end}, before offset {first} already read"
                              for p, (first, end) in sorted(behind.items()))
            raise SourceError(
                f"source {self.name!r}: {shown}: the topic was deleted and created again. Its "
                "offsets start over, so this pipeline's positions mean nothing there: read it with "
                "a new pipeline (or reset this one to a checkpoint from before the topic was read).")

    def _check_kept(self, start: Positions, ends: Positions) -> None:
        """Fail, before anything is planned, when offsets after ``start`` that were never read
        are gone (retention, a recreated topic)."""
        behind = {p: first for p, first in start.items() if ends[p] > first}
        earliest = self.connection.offsets(behind, "earliest") if behind else {}
        self._fail_if_lost({p: (first, earliest[p]) for p, first in behind.items() if earliest[p] > first})

    def _fail_if_lost(self, lost: Mapping[str, tuple[int, int]]) -> None:
        """The error for offsets ``[a, b)`` per partition deleted before they were read."""
        if not lost:
            return
        missing = "; ".join(f"{p} offsets {a}..{b - 1}" for p, (a, b) in sorted(lost.items()))
        raise SourceError(
            f"source {self.name!r}: Kafka no longer holds {missing} (deleted by retention or the "
            "topic was recreated) and they were never read. To go on from the first offset kept, "
            "recording the gap in dead letters, define the source with on_missing='skip'.")

    def _bounded(self, start: Positions, ends: Positions) -> Positions:
        """The end of one slice from ``start``: every partition to its end, or ``max_records``
        offsets shared out fairly (each partition in turn, a share at a time)."""
        if self.max_records is None:
            return {p: max(start[p], ends[p]) for p in start}
        end, budget = dict(start), self.max_records
        while budget > 0:
            open_parts = [p for p in start if ends[p] > end[p]]
            if not open_parts:
                break
            share = max(1, budget // len(open_parts))
            for p in open_parts:
                step = min(share, ends[p] - end[p], budget)
                end[p] += step
                budget -= step
        return end

    def with_rowtime(self) -> tuple[Source, str]:
        """ROWTIME is the record's Kafka timestamp, which every row carries as ``_timestamp``."""
        return self, "_timestamp"

    def lag(self, ctx: RunContext, after: Any) -> int:
        return sum(self.lag_by_part(ctx, after).values())

    def lag_by_part(self, ctx: RunContext, after: Any) -> dict[str, int]:
        return self.unread(after)

    def unread(self, after: Any) -> dict[str, int]:
        """Offsets past ``after`` per partition (read committed), without Spark."""
        parts = self.connection.partitions(self.topics)
        ends = self.connection.offsets(parts, "latest")
        if after is None and self.starting == "latest":
            return dict.fromkeys(parts, 0)
        start = self._start(parts, after)
        return {p: max(0, ends[p] - start[p]) for p in parts}

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        """The read-committed end offsets, as a token (``None`` while every partition is empty)."""
        ends = self.connection.ends(self.topics)
        if not any(ends.values()):
            return None
        return ",".join(f"{p}={offset}" for p, offset in sorted(ends.items()))

    # reading ------------------------------------------------------------------------------------
    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        ranges, gaps = self._ranges(start, end)
        if sum(stop - first for first, stop in ranges.values()) >= SPARK_READ_FROM:
            # both halves are read here, so the decoded records are kept for the second and
            # dropped once it is done (read_frame cannot: its good rows are read later)
            checked = self._checked_with_spark(ctx.spark, ranges).persist()
            try:
                framed = _split(checked, ranges)
                good: pd.DataFrame = framed.good.toPandas()
            finally:
                checked.unpersist()
            good = good.sort_values(ORDER_COLUMN).drop(columns=[ORDER_COLUMN]).reset_index(drop=True)
            return Slice(self._typed(good), pd.concat([gaps, framed.rejected], ignore_index=True))
        rows: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        for part, message in self._consume(ranges):
            self.decoder.decode(part, message, rows, rejected)
        good = self.schema.frame(rows, list(range(len(rows))))
        return Slice(self._typed(good), pd.concat(
            [gaps, pd.DataFrame(rejected, columns=REJECTED_COLUMNS)], ignore_index=True))

    def read_frame(self, ctx: RunContext, start: Any, end: Any) -> FrameSlice:
        """Read by Spark's Kafka source, executors in parallel, decoded there by the same
        checks; only rejected records come to the driver."""
        ranges, gaps = self._ranges(start, end)
        if not ranges:
            return FrameSlice(FrameSlice.empty(ctx.spark, self.schema).good, gaps)
        # not cached: the good rows are read by the stages after this returns, and nothing
        # would drop a cache then; the rejected rows cost a second scan, as for Delta sources
        framed = _split(self._checked_with_spark(ctx.spark, ranges), ranges)
        return FrameSlice(framed.good, pd.concat([gaps, framed.rejected], ignore_index=True))

    def _ranges(self, start: Positions, end: Positions) -> tuple[dict[str, tuple[int, int]], pd.DataFrame]:
        """The offsets ``[first, stop)`` to read per partition, checked against what the
        brokers still keep; with ``on_missing="skip"``, lost ranges come back as dead letters."""
        wanted = {p: (int(start.get(p, 0)), int(stop)) for p, stop in end.items() if stop > start.get(p, 0)}
        if not wanted:
            return {}, Slice.no_rejects()
        self.connection.partitions(sorted({parse_part(p)[0] for p in wanted}))  # topics still there
        earliest = self.connection.offsets(wanted, "earliest")
        lost = {p: (first, min(stop, earliest[p])) for p, (first, stop) in wanted.items()
                if earliest[p] > first}
        if self.on_missing == "fail":
            self._fail_if_lost(lost)
        gaps = pd.DataFrame([{"position": f"{p}@{a}..{b - 1}",
                              "reason": "offsets deleted by Kafka (retention) before they were read",
                              "raw": ""} for p, (a, b) in sorted(lost.items())], columns=REJECTED_COLUMNS)
        ranges = {p: (max(first, earliest[p]), stop) for p, (first, stop) in wanted.items()}
        return {p: r for p, r in ranges.items() if r[1] > r[0]}, gaps

    def _consume(self, ranges: Mapping[str, tuple[int, int]]) -> Iterator[tuple[str, Any]]:
        """The messages of ``ranges``, in partition then offset order. A partition is done at
        its range's last offset, at the first offset past it (control records of transactions
        take offsets no message has), or at its read-committed end."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(self.connection.config(**{
            "group.id": f"lakestream.{self.name}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True,
            "auto.offset.reset": "error", "fetch.max.bytes": 64 << 20}))
        try:
            consumer.assign([TopicPartition(*parse_part(p), first) for p, (first, _) in ranges.items()])
            pending = {p: [] for p in sorted(ranges, key=parse_part)}  # type: dict[str, list[Any]]
            # no record and no end of partition for twice the brokers' timeout: the batch fails
            stall = 2 * self.connection.timeout
            open_parts, waited_since = set(ranges), time.monotonic()
            reached = {p: first for p, (first, _) in ranges.items()}  # next offset per partition
            while open_parts:
                # ask for no more than can still come (records, and one end-of-partition event
                # each), so consume returns once they are in instead of waiting out its timeout
                due = sum(ranges[p][1] - reached[p] + 1 for p in open_parts)
                messages = consumer.consume(num_messages=max(1, min(10_000, due)), timeout=0.05)
                if messages:
                    waited_since = time.monotonic()
                elif time.monotonic() - waited_since > stall:
                    raise self.connection.unreachable(
                        f"reading {sorted(open_parts)} for source {self.name!r}",
                        TimeoutError(f"no record for {stall:g} s"))
                for message in messages:
                    part = part_id(str(message.topic()), int(message.partition() or 0))
                    if part not in open_parts:
                        continue
                    stop, offset = ranges[part][1], int(message.offset() or 0)
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise SourceError(f"source {self.name!r}: reading {part}: {error}")
                        if offset >= stop:
                            open_parts.discard(part)
                        continue
                    reached[part] = offset + 1
                    if offset < stop:
                        pending[part].append(message)
                    if offset >= stop - 1:
                        open_parts.discard(part)
                        consumer.pause([TopicPartition(*parse_part(part))])
        finally:
            consumer.close()
        for part, messages in pending.items():
            for message in messages:
                yield part, message

    def _typed(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Metadata columns with their types even when the batch is empty."""
        return frame if len(frame) else self.schema.frame([], [])

    def _checked_with_spark(self, spark: SparkSession, ranges: Mapping[str, tuple[int, int]]) -> DataFrame:
        """``ranges`` (not empty) read by Spark's Kafka source (bounded start and end offsets,
        read committed), decoded and checked on executors: the schema's columns, plus the
        reason (``__reason``) and the raw value (``__raw``) of a rejected record."""
        schema = self.schema.spark_schema()
        if self.decoder.registry is not None:  # executors get the writer schemas known so far
            self.decoder.registry.learn(self.topics)
        by_topic: dict[str, dict[str, dict[str, int]]] = {}
        for part, (first, stop) in ranges.items():
            topic, partition = parse_part(part)
            by_topic.setdefault(topic, {}).setdefault("start", {})[str(partition)] = first
            by_topic[topic].setdefault("end", {})[str(partition)] = stop
        raw = (spark.read.format("kafka").options(**self.connection.spark_options())
               .option("assign", json.dumps({t: [int(p) for p in o["start"]] for t, o in by_topic.items()}))
               .option("startingOffsets", json.dumps({t: o["start"] for t, o in by_topic.items()}))
               .option("endingOffsets", json.dumps({t: o["end"] for t, o in by_topic.items()}))
               .option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "true")
               .load().select("key", "value", "topic", "partition", "offset", "timestamp"))
        checked_schema = StructType([*schema.fields, StructField("__reason", StringType()),
                                     StructField("__raw", StringType())])
        decode = SparkDecoder(self.decoder, [f.name for f in schema.fields])
        return raw.mapInPandas(decode, checked_schema)


def _split(checked: DataFrame, ranges: Mapping[str, tuple[int, int]]) -> FrameSlice:
    """Decoded records as the good rows, numbered in topic, partition, offset order, and
    the rejected ones collected with their positions. A record's number is its offset's
    place in the plan's ``ranges`` (partitions in order, each taking as many numbers as
    its range holds offsets): no sort of the batch, and the same number on every reading."""
    parts = sorted((parse_part(part), first, stop) for part, (first, stop) in ranges.items())
    bases = np.cumsum([0] + [stop - first for _, first, stop in parts])
    starts = tables.literal_frame(  # joined by broadcast: each row stays where it was read
        checked.sparkSession, [("_topic", "string"), ("_partition", "long"), ("__start", "long")],
        [(topic, partition, int(FIRST_ORDINAL + base - first))
         for ((topic, partition), first, _), base in zip(parts, bases)])
    good = checked.where(F.col("__reason").isNull()).drop("__reason", "__raw")
    numbered = (F.col("__start") + F.col("_offset")).alias(ORDER_COLUMN)
    good = good.join(F.broadcast(starts), ["_topic", "_partition"]).select(
        *[F.col(f"`{c}`") for c in good.columns], numbered)
    bad: pd.DataFrame = checked.where(F.col("__reason").isNotNull()).select(
        "_topic", "_partition", "_offset", "__reason", "__raw").toPandas()
    bad = bad.sort_values(["_topic", "_partition", "_offset"])
    rejected = pd.DataFrame({
        "position": [f"{part_id(t, int(p))}@{int(o)}"
                     for t, p, o in zip(bad["_topic"], bad["_partition"], bad["_offset"])],
        "reason": bad["__reason"].tolist(), "raw": bad["__raw"].tolist()}, columns=REJECTED_COLUMNS)
    return FrameSlice(good, rejected)


def kafka_schema(fields: Mapping[str, str] | None, value_format: str,
                 key: str | tuple[str, ...] | None) -> RecordSchema:
    """The record schema of a Kafka source: the value's fields and the metadata columns."""
    declared = {"value": "string"} if value_format == "string" else dict(fields or {})
    clash = sorted(set(declared) & set(KAFKA_COLUMNS))
    if clash:
        raise PipelineDefinitionError(f"Kafka source fields {clash} clash with the columns every "
                                      f"Kafka row carries ({', '.join(KAFKA_COLUMNS)})")
    return RecordSchema({**declared, **metadata_fields()}, key)
