"""``.write.to_kafka(topic, bootstrap=…)``: each batch's rows as records of a Kafka topic.

**Exactly-once** (the default). A batch is one Kafka transaction of a transactional producer
whose id is the pipeline's and the sink's (``lakestream.<pipeline>.<sink>``); with its records
the transaction commits a marker, the batch id and epoch, as the offset of a consumer group of
the same name (Kafka's ``sendOffsetsToTransaction``, as Kafka Streams commits its input
positions), so the records and the marker become visible together or not at all. The sink
writes before the pipeline's checkpoint; a run that died between the two replays the batch,
finds the marker at or past it and sends nothing. A run that died in the middle of a
transaction leaves it open; the next run's producer, with the same id, aborts it before it
sends anything (Kafka's fencing), so a ``read_committed`` consumer sees every row once. A
batch whose transaction fails (the broker down, say) fails the run and releases its producer
there and then: the transaction aborted if the broker answers within :data:`RELEASE_SECONDS`
(else the next run's producer aborts it), its records purged, and the producer destroyed, so
that it cannot fence the next run's. Every
record also carries the headers ``lakestream.pipeline``, ``lakestream.batch`` and
``lakestream.epoch``, so consumers can tell batches apart.

**At-least-once** (``delivery="at_least_once"``): Spark's own Kafka writer, which retries
without transactions; a replayed batch is sent again. Only when that is what you want.

Values are JSON objects of the row's columns (``value_format="json"``), the text of one
column (``"string"``, column ``value``), or records of a schema registry's format (``"avro"``,
``"protobuf"``, ``"json_schema"``, with ``registry=``) whose schema is made from the columns
and registered under the topic's subject (``register=False``: only looked up; see
:mod:`ops.kafka_client.serde`). The key is a column's text (``key=``) or none. A batch is
encoded whole before its transaction begins, so a row that cannot be encoded sends nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from state import fault_point

from ..columns import KAFKA_COLUMNS, ORDER_COLUMN, ROW_COLUMN, WRITTEN_COLUMNS
from ..context import RunContext
from ..errors import PipelineDefinitionError, SinkError
from ..kafka_client import KafkaConnection, call_within
from ..kafka_client.registry import REGISTRY_FORMATS, SchemaRegistry
from ..kafka_client.serde import RegistryEncoder
from .base import Sink

log = logging.getLogger(__name__)

DELIVERIES = ("exactly_once", "at_least_once")
VALUE_FORMATS = ("json", "string", *REGISTRY_FORMATS)
_LEFT_OUT = {*KAFKA_COLUMNS, *WRITTEN_COLUMNS, ORDER_COLUMN}  # lakestream's, not the row's


@dataclass(frozen=True)
class Marker:
    """The last batch a sink's transactions committed to Kafka."""

    epoch: int
    batch_id: int

    def covers(self, epoch: int, batch_id: int) -> bool:
        """Whether batch ``batch_id`` of ``epoch`` is in the topic already. A reset starts a new
        epoch, whose batches are written again (Kafka cannot take the old ones back)."""
        return self.epoch == epoch and batch_id <= self.batch_id


def read_marker(connection: KafkaConnection, group: str, topic: str) -> Marker | None:
    """The marker the transactions of consumer group ``group`` committed for ``topic``
    (``None``: none yet). Reads only: no producer is started, so no writer is fenced."""
    from confluent_kafka import Consumer

    consumer = Consumer(connection.config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        return _committed_marker(consumer, topic, connection.timeout)
    finally:
        consumer.close()


def _committed_marker(group: Any, topic: str, timeout: float) -> Marker | None:
    """The marker committed for ``topic`` by the consumer ``group`` belongs to. Retried while
    the broker says to: its group coordinator answers ``NOT_COORDINATOR`` while it loads the
    offsets, after a restart or on a fresh broker."""
    from confluent_kafka import TopicPartition

    [committed] = _retrying(timeout, lambda left: group.committed([TopicPartition(topic, 0)],
                                                                  timeout=left))
    if committed.offset < 0 or not committed.metadata:
        return None
    stored = json.loads(committed.metadata)
    return Marker(int(stored["epoch"]), int(stored["batch"]))


def _retrying(timeout: float, call: Callable[[float], Any]) -> Any:
    """``call(seconds_left)``, again while it raises a Kafka error that passes (a coordinator
    still loading), for ``timeout`` seconds in all."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return call(max(1.0, deadline - time.monotonic()))
        except KafkaException as error:
            if not _passes(error.args[0]) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _passes(error: Any) -> bool:
    """Whether Kafka error ``error`` goes away by itself: one flagged retriable, or a
    coordinator not ready yet, which ``Consumer.committed`` reports unflagged (seen on a
    freshly started broker: ``NOT_COORDINATOR`` for a few hundred milliseconds)."""
    from confluent_kafka import KafkaError

    return bool(error.retriable()) or error.code() in (
        KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE)


#: Seconds releasing a run's producer may wait for the broker to abort the transaction a
#: failed batch left open. Short, because the broker is most often down then, and waiting does
#: not bring it back; and an abort left undone costs little: the transaction stays open (a
#: ``read_committed`` consumer of the topic waits at it) until the next producer with the same
#: transactional id starts, which aborts it first, or until ``transaction.timeout.ms``. A broker
#: that is up aborts within milliseconds.
RELEASE_SECONDS = 2.0


class _Transactions:
    """One run's transactional producer (and the consumer whose group the marker is committed
    as), and the marker it found when it started.

    :meth:`release` lets both go, when the run ends or a transaction of it fails: nothing
    refers to them afterwards, so librdkafka destroys them there and then. A failed run's
    producer left alive (referred to by the run's error, say, or waiting for the garbage
    collector) goes on with its transaction in librdkafka's threads; once the broker is back it
    aborts it and bumps the producer epoch, which fences the next run's producer ("fenced by
    newer producer instance")."""

    def __init__(self, sink: KafkaSink, ctx: RunContext):
        from confluent_kafka import Consumer, Producer

        self.id = sink.transactional_id(ctx)
        self.producer: Any = Producer(sink.connection.config(**{
            "transactional.id": self.id, "enable.idempotence": True,
            "transaction.timeout.ms": sink.transaction_timeout_ms, "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000}))
        # what the marker is committed as: an offset of this group, within the transaction
        self.group: Any = Consumer(sink.connection.config(**{"group.id": self.id,
                                                             "enable.auto.commit": False}))
        self.in_transaction = False  # begun and not committed: release aborts it
        try:
            self._init_transactions(sink.connection.timeout)
            # read after init_transactions: an older run's open transaction is aborted by then
            self.marker = _committed_marker(self.group, sink.topic, sink.connection.timeout)
        except Exception as error:
            self.release()
            _forget_locals(error)
            raise sink.connection.unreachable(
                f"starting transactional producer {self.id!r} of sink {sink.name!r}", error,
                SinkError) from error

    def _init_transactions(self, timeout: float) -> None:
        """Register the transactional id: this fences any older producer with the id and
        aborts the transaction it left open. Retried while the broker says to (its transaction
        coordinator still loading, after a restart)."""
        _retrying(timeout, self.producer.init_transactions)

    def send(self, topic: str, batch_id: int, keys: list[str | None], values: list[bytes],
             headers: list[tuple[str, bytes]], marker: str, timeout: float) -> None:
        """One transaction: the records, then ``marker`` as the group's offset of ``topic``
        (``batch_id``), committed. One that raises may be left open: :meth:`release` aborts it."""
        from confluent_kafka import TopicPartition

        producer = self._live()
        producer.begin_transaction()
        self.in_transaction = True
        half = len(values) // 2
        for n, (key, value) in enumerate(zip(keys, values)):
            if n == half:
                producer.flush(timeout)  # so a crash here leaves records in the open transaction
                fault_point("kafka_mid_send")
            _produce(producer, topic, key, value, headers)
        call_within(timeout, "adding the marker to the transaction",
                    producer.send_offsets_to_transaction,
                    [TopicPartition(topic, 0, batch_id, metadata=marker)],
                    self.group.consumer_group_metadata(), timeout)
        producer.commit_transaction(timeout)
        self.in_transaction = False

    def _live(self) -> Any:
        """The producer, unless it was released."""
        if self.producer is None:
            raise SinkError(f"transactional producer {self.id!r} was released (its run ended, or "
                            "a transaction of it failed)")
        return self.producer

    def release(self) -> None:
        """Let the producer and the consumer go (once; again does nothing): abort the open
        transaction, waiting at most :data:`RELEASE_SECONDS`, purge the records the producer
        still holds, close the consumer, and keep no reference to either. Never raises, and
        never waits for the broker longer than that: ``Producer.close()`` is not used because
        it aborts and flushes without a timeout (it waited for good with the broker down),
        while destroying a purged producer does not wait for the broker."""
        producer, group = self.producer, self.group
        self.producer = self.group = None
        if producer is None:
            return
        if self.in_transaction:
            self.in_transaction = False
            _quietly(f"aborting the transaction of {self.id!r}", producer.abort_transaction,
                     RELEASE_SECONDS)
        _quietly(f"purging the records of {self.id!r}", producer.purge)
        _quietly(f"closing the consumer of group {self.id!r}", group.close)


@dataclass(frozen=True)
class KafkaSink(Sink):
    """Writes each batch to ``topic``; see the module's docstring for the guarantees."""

    name: str
    topic: str
    connection: KafkaConnection
    key: str | None = None
    value_format: str = "json"
    delivery: str = "exactly_once"
    transaction_timeout_ms: int = 60_000
    #: the schema registry of a registry format, and whether the sink registers its schema
    registry: SchemaRegistry | None = None
    register: bool = True
    _encoder: list[RegistryEncoder] = field(default_factory=list, compare=False, repr=False, hash=False)
    _runs: dict[str, _Transactions] = field(default_factory=dict, compare=False, repr=False, hash=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        where = f"sink {self.name!r}"
        if not self.topic or ":" in self.topic:
            raise PipelineDefinitionError(f"{where}: {self.topic!r} is not a topic name")
        if self.value_format not in VALUE_FORMATS:
            raise PipelineDefinitionError(f"{where}: value_format must be one of {VALUE_FORMATS}")
        if self.delivery not in DELIVERIES:
            raise PipelineDefinitionError(f"{where}: delivery must be one of {DELIVERIES}")
        if (self.value_format in REGISTRY_FORMATS) != (self.registry is not None):
            raise PipelineDefinitionError(
                f"{where}: a schema registry goes with value_format one of {REGISTRY_FORMATS}, "
                f"and only with those (value_format={self.value_format!r})")
        if self.registry is not None:
            if self.delivery == "at_least_once":
                raise PipelineDefinitionError(
                    f"{where}: delivery='at_least_once' sends through Spark's Kafka writer, "
                    f"which writes JSON or text; {self.value_format} goes through the "
                    "exactly-once sink (the default)")
            self._encoder.append(RegistryEncoder(self.registry, self.value_format, self.topic,
                                                 self.topic, self.register))

    def transactional_id(self, ctx: RunContext) -> str:
        """The producer's transactional id, also the marker's consumer group."""
        return f"lakestream.{ctx.pipeline}.{self.name}"

    def marker(self, ctx: RunContext) -> Marker | None:
        """The last batch this sink committed to the topic (``None``: none yet); reading it
        disturbs no run that is writing."""
        return read_marker(self.connection, self.transactional_id(ctx), self.topic)

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if self.delivery == "at_least_once":
            if len(frame):
                self._write_with_spark(ctx, batch_id, ctx.spark.createDataFrame(frame))
            return
        transactions = self._transactions(ctx)
        if transactions.marker is not None and transactions.marker.covers(ctx.epoch, batch_id):
            log.info("%s: sink %s: batch %d is in topic %s already (a replay): nothing sent",
                     ctx.pipeline, self.name, batch_id, self.topic)
            return
        if frame.empty:
            return
        keys, values = self._encode(frame)
        self._send(ctx, transactions, batch_id, keys, values)

    def write_frame(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        if self.delivery == "at_least_once":
            self._write_with_spark(ctx, batch_id, frame)
        else:
            super().write_frame(ctx, batch_id, frame)

    def close(self, ctx: RunContext) -> None:
        with self._lock:
            transactions = self._runs.pop(ctx.run_id, None)
        if transactions is not None:
            transactions.release()

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        log.warning("%s: sink %s: Kafka cannot take back what batches after %d sent to topic %s; "
                    "consumers keep them and will also see the batches run again",
                    ctx.pipeline, self.name, batch_id, self.topic)

    def _encode(self, frame: pd.DataFrame) -> tuple[list[str | None], list[bytes]]:
        """Each row's key text and value bytes, in order."""
        if self.key is not None and self.key not in frame:
            raise SinkError(f"sink {self.name!r}: key column {self.key!r} is not in the output "
                            f"(columns: {list(frame.columns)})")
        keys: list[str | None] = [None] * len(frame)
        if self.key:
            keys = [None if pd.isna(k) else str(k) for k in frame[self.key]]
        if self.value_format == "string":
            if "value" not in frame:
                raise SinkError(f"sink {self.name!r}: value_format='string' sends column 'value', "
                                f"which the output lacks (columns: {list(frame.columns)})")
            return keys, [("" if pd.isna(v) else str(v)).encode() for v in frame["value"]]
        columns = [c for c in frame.columns if c not in _LEFT_OUT]
        if self._encoder:
            return keys, self._encoded(frame[columns])
        lines = frame[columns].to_json(orient="records", lines=True, date_format="iso",
                                       date_unit="us", force_ascii=False)
        return keys, [line.encode() for line in str(lines).splitlines()]

    def _encoded(self, frame: pd.DataFrame) -> list[bytes]:
        """The rows in the registry format, with a schema of the columns' kinds."""
        kinds = column_kinds(frame)
        rows = frame.astype(object).where(frame.notna(), None)
        for column, kind in kinds.items():
            if kind == "string":
                rows[column] = [v if v is None or isinstance(v, str) else str(v) for v in rows[column]]
        try:
            return self._encoder[0].encode(rows.to_dict(orient="records"), kinds)
        except ValueError as error:
            raise SinkError(f"sink {self.name!r}: batch not sent to topic {self.topic!r}: {error}") from None

    def _send(self, ctx: RunContext, transactions: _Transactions, batch_id: int,
              keys: list[str | None], values: list[bytes]) -> None:
        """One transaction: the records, then the marker; committed. On failure the run's
        producer is released (the transaction aborted if the broker answers in time) before
        the error is raised: the run fails, and its producer must not outlive it."""
        headers = [("lakestream.pipeline", ctx.pipeline.encode()),
                   ("lakestream.batch", str(batch_id).encode()),
                   ("lakestream.epoch", str(ctx.epoch).encode())]
        marker = json.dumps({"epoch": ctx.epoch, "batch": batch_id, "pipeline": ctx.pipeline})
        fault_point("kafka_before_send")
        try:
            transactions.send(self.topic, batch_id, keys, values, headers, marker,
                              self.connection.timeout)
        except Exception as error:
            self._release(ctx, transactions)
            _forget_locals(error)
            raise SinkError(f"sink {self.name!r}: batch {batch_id} could not be written to Kafka "
                            f"topic {self.topic!r} at {self.connection.bootstrap} ({error}); the "
                            "transaction is not committed (if this producer could not abort it, "
                            "the next run's does) and the next run writes the batch again") from error
        fault_point("kafka_after_commit")
        transactions.marker = Marker(ctx.epoch, batch_id)

    def _transactions(self, ctx: RunContext) -> _Transactions:
        """This run's producer, started (and the marker read) on the run's first write."""
        with self._lock:
            current = self._runs.get(ctx.run_id)
            if current is None:
                for old in self._runs.values():
                    old.release()
                self._runs.clear()
                current = self._runs[ctx.run_id] = _Transactions(self, ctx)
            return current

    def _release(self, ctx: RunContext, transactions: _Transactions) -> None:
        """Release ``transactions`` and forget them as the run's (a later write of the run,
        were there one, would start a new producer, fencing this one)."""
        with self._lock:
            if self._runs.get(ctx.run_id) is transactions:
                del self._runs[ctx.run_id]
        transactions.release()

    def _write_with_spark(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        """At least once: Spark's Kafka writer, from the executors."""
        columns = [c for c in frame.columns if c not in _LEFT_OUT and c != ROW_COLUMN]
        value = (F.col("value").cast("string") if self.value_format == "string"
                 else F.to_json(F.struct(*columns)))
        key = F.col(self.key).cast("string") if self.key else F.lit(None).cast("string")
        headers = F.array(*(F.struct(F.lit(name).alias("key"), F.lit(text).cast("binary").alias("value"))
                            for name, text in (("lakestream.pipeline", ctx.pipeline),
                                               ("lakestream.batch", str(batch_id)),
                                               ("lakestream.epoch", str(ctx.epoch)))))
        (frame.select(key.alias("key"), value.alias("value"), headers.alias("headers"))
         .write.format("kafka").options(**self.connection.spark_options())
         .option("topic", self.topic).save())


def column_kinds(frame: pd.DataFrame) -> dict[str, str]:
    """The kind of each column (``long``, ``double``, ``boolean``, ``timestamp``, else
    ``string``), from its dtype, for a registry schema.

    >>> column_kinds(pd.DataFrame({"n": [1], "x": [0.5], "s": ["a"], "b": [True]}))
    {'n': 'long', 'x': 'double', 's': 'string', 'b': 'boolean'}
    """
    kinds = {}
    for column, dtype in frame.dtypes.items():
        if pd.api.types.is_bool_dtype(dtype):
            kinds[str(column)] = "boolean"
        elif pd.api.types.is_integer_dtype(dtype):
            kinds[str(column)] = "long"
        elif pd.api.types.is_float_dtype(dtype):
            kinds[str(column)] = "double"
        elif pd.api.types.is_datetime64_any_dtype(dtype):
            kinds[str(column)] = "timestamp"
        else:
            kinds[str(column)] = "string"
    return kinds


def _produce(producer: Any, topic: str, key: str | None, value: bytes,
             headers: list[tuple[str, bytes]]) -> None:
    """Queue one record, waiting for room when the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=None if key is None else key.encode(),
                             headers=headers)
            return
        except BufferError:
            producer.poll(0.1)


def _quietly(doing: str, call: Callable[..., Any], *args: Any) -> None:
    """``call(*args)``; an error is logged, not raised: releasing never fails, and a failed
    write's own error is the one to report. Logged as text only: a log record kept with its
    traceback (a test's log capture keeps them) would keep this frame alive, and with it the
    producer ``call`` is a method of."""
    try:
        call(*args)
    except Exception as error:  # noqa: BLE001 - see above
        log.warning("%s failed: %s", doing, error)


def _forget_locals(error: BaseException) -> None:
    """Clear the variables of the frames ``error`` and the errors it came from went through,
    once they returned (the traceback still prints): whoever keeps the error to report it (a
    failed run's caller, Dagster) would otherwise keep alive the released producer that such a
    frame had in a variable, and its librdkafka threads with it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__
