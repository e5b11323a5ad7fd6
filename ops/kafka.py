"""Talking to Kafka: the connection settings a source and a sink share, offsets and partitions.

Positions in Kafka are per partition; lakestream writes them as JSON objects keyed
``"<topic>:<partition>"`` (a colon never appears in a topic name) whose values are the next
offset to read, Kafka's own convention: a slice ``(start, end]`` reads offsets
``start[p] … end[p] - 1`` of each partition ``p``.

>>> part_id("orders", 3), parse_part("orders:3")
('orders:3', ('orders', 3))
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, SourceError, StreamError


class _ClientLog:
    """Where librdkafka's own lines go: debug lines of logger ``ops.kafka.client``. It logs
    every failed connection attempt, many a second while a broker is down; lakestream's own
    error names the brokers once, so these are detail for whoever turns debug logging on."""

    _log = logging.getLogger("ops.kafka.client")

    def log(self, level: int, message: str, *args: Any) -> None:
        self._log.debug(message, *args)


_client_log = _ClientLog()
#: Seconds a call to the brokers may take before lakestream says they are unreachable.
DEFAULT_TIMEOUT = 15.0


def call_within(timeout: float, doing: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, waited for no longer than ``timeout`` seconds (and one of grace), for
    the librdkafka calls that can ignore their own timeout: ``send_offsets_to_transaction``
    waits for good when the group coordinator goes down during the call (librdkafka issue
    5456, still open in 2.16). A call given up on goes on in a daemon thread, and the caller
    gets ``TimeoutError`` naming what was being ``doing``; the call's own error is re-raised.

    >>> call_within(1, "adding", sum, [1, 2])
    3
    >>> call_within(1, "parsing", int, "x")
    Traceback (most recent call last):
    ValueError: invalid literal for int() with base 10: 'x'
    >>> import threading
    >>> call_within(0.1, "waiting for nothing", threading.Event().wait)
    Traceback (most recent call last):
    TimeoutError: waiting for nothing did not return within 0.1 s
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call(*args)))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, error))

    worker = threading.Thread(target=run, name="lakestream-kafka-call", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    if not outcome:
        raise TimeoutError(f"{doing} did not return within {timeout:g} s")
    returned, value = outcome[0]
    if not returned:
        raise value
    return value


def part_id(topic: str, partition: int) -> str:
    """The name a topic partition has in positions: ``"<topic>:<partition>"``."""
    return f"{topic}:{partition}"


def parse_part(name: str) -> tuple[str, int]:
    """``"orders:3"`` -> ``("orders", 3)``."""
    topic, _, partition = name.rpartition(":")
    return topic, int(partition)


@dataclass(frozen=True)
class KafkaConnection:
    """Where the brokers are and how to talk to them.

    ``options`` are librdkafka settings passed through unchanged (``security.protocol``,
    ``sasl.*``, ``ssl.*``…); the Spark reader and writer get them too, prefixed ``kafka.``.
    """

    bootstrap: str
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if not self.bootstrap or not all(":" in server for server in self.bootstrap.split(",")):
            raise ConfigError(f"Kafka bootstrap servers must be host:port[,host:port…], got "
                              f"{self.bootstrap!r}")

    def config(self, **more: Any) -> dict[str, Any]:
        """librdkafka settings: the brokers, the user's options, then ``more``."""
        # a request to a broker that went away fails after the timeout, not librdkafka's 60 s
        return {"bootstrap.servers": self.bootstrap, "logger": _client_log,
                "socket.timeout.ms": int(self.timeout * 1000), **dict(self.options), **more}

    def spark_options(self) -> dict[str, str]:
        """The same settings for Spark's Kafka source and sink."""
        return {"kafka.bootstrap.servers": self.bootstrap,
                **{f"kafka.{key}": value for key, value in self.options}}

    def unreachable(self, doing: str, error: BaseException,
                    kind: type[StreamError] = SourceError) -> StreamError:
        """The error for a call that failed: names the brokers and what was being done."""
        return kind(f"Kafka at {self.bootstrap} did not answer while {doing} within "
                    f"{self.timeout:g} s ({error}); is the broker up and reachable from here?")

    def partitions(self, topics: Iterable[str]) -> list[str]:
        """Every partition of ``topics``, as position names, in topic then partition order.
        Raises :class:`SourceError` naming a topic that does not exist."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.config())
        try:
            metadata = admin.list_topics(timeout=self.timeout)
        except Exception as error:  # KafkaException: the brokers did not answer
            raise self.unreachable("listing topics", error) from error
        parts = []
        for topic in topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise SourceError(f"Kafka topic {topic!r} does not exist on {self.bootstrap}"
                                  + (f" ({found.error})" if found is not None and found.error else ""))
            parts += [part_id(topic, p) for p in sorted(found.partitions)]
        return parts

    def offsets(self, parts: Iterable[str], which: str) -> dict[str, int]:
        """The ``"earliest"`` (first kept) or ``"latest"`` (read-committed end: the last
        stable offset, so records of open transactions are not counted) offset of each partition."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        spec = OffsetSpec.latest() if which == "latest" else OffsetSpec.earliest()
        wanted = {TopicPartition(*parse_part(p)): spec for p in parts}
        if not wanted:
            return {}
        admin = AdminClient(self.config())
        try:
            answers = admin.list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=self.timeout)
            return {part_id(tp.topic, tp.partition): answer.result().offset
                    for tp, answer in answers.items()}
        except Exception as error:  # KafkaException: unreachable or the topic went away
            raise self.unreachable(f"reading the {which} offsets of {sorted(map(str, parts))}",
                                   error) from error

    def ends(self, topics: Iterable[str]) -> dict[str, int]:
        """The read-committed end offset of every partition of ``topics``."""
        return self.offsets(self.partitions(topics), "latest")


def connection(bootstrap: str, options: Mapping[str, str] | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> KafkaConnection:
    """A :class:`KafkaConnection` from plain arguments (options sorted, so equal ones compare equal)."""
    return KafkaConnection(bootstrap, tuple(sorted((options or {}).items())), timeout)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> None:
    """Create ``topic`` (nothing when it exists with as many partitions or more).

    >>> create_topic("127.0.0.1:9092", "orders", partitions=3)   # doctest: +SKIP
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(connection(bootstrap).config())
    future = admin.create_topics([NewTopic(topic, partitions, 1, config=config)],
                                 operation_timeout=DEFAULT_TIMEOUT)[topic]
    try:
        future.result(DEFAULT_TIMEOUT)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def send_json(bootstrap: str, topic: str, records: Iterable[Mapping[str, Any]],
              key: str | None = None, partition: int | None = None) -> int:
    """Send ``records`` as JSON objects (``key``: the field whose text is the record key);
    returns how many were acknowledged. For examples, tests and benchmarks.

    >>> send_json("127.0.0.1:9092", "orders", [{"item": "tea", "qty": 2}], key="item")  # doctest: +SKIP
    1
    """
    import json

    from confluent_kafka import Producer

    producer = Producer(connection(bootstrap).config(**{
        "linger.ms": 5, "acks": "all", "queue.buffering.max.messages": 1_000_000}))
    sent = 0
    for record in records:
        text = None if key is None or record.get(key) is None else str(record[key]).encode()
        while True:
            try:
                producer.produce(topic, json.dumps(record, default=str).encode(), key=text,
                                 partition=-1 if partition is None else partition)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
    left = producer.flush(DEFAULT_TIMEOUT * 4)
    if left:
        raise SourceError(f"{left} of {sent} records were not acknowledged by Kafka at {bootstrap}")
    return sent


def read_topic(bootstrap: str, topic: str, timeout: float = DEFAULT_TIMEOUT) -> list[dict[str, Any]]:
    """Every committed record of ``topic`` (``isolation.level=read_committed``), in partition
    then offset order: ``key``, ``value`` (text), ``partition``, ``offset`` and ``headers``
    (a dict). What an exactly-once consumer sees; for tests and examples."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    brokers = connection(bootstrap, timeout=timeout)
    parts = brokers.partitions([topic])
    consumer = Consumer(brokers.config(**{
        "group.id": "lakestream.read_topic", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True,
        "auto.offset.reset": "earliest"}))
    records: list[dict[str, Any]] = []
    try:
        consumer.assign([TopicPartition(*parse_part(p), -2) for p in parts])  # -2: the beginning
        open_parts, deadline = set(parts), time.monotonic() + timeout
        while open_parts and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                part = part_id(str(message.topic()), int(message.partition() or 0))
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(part)
                    continue
                value, key = message.value(), message.key()
                records.append({"key": None if key is None else bytes(key).decode(),
                                "value": None if value is None else bytes(value).decode(),
                                "partition": message.partition(), "offset": message.offset(),
                                "headers": _headers(message.headers())})
        if open_parts:
            raise brokers.unreachable(f"reading topic {topic!r} to its end", TimeoutError(
                f"{sorted(open_parts)} not read to their end in {timeout:g} s"))
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r["partition"], r["offset"]))


def _headers(headers: Any) -> dict[str, str]:
    """A record's headers as text (``None`` values as empty text)."""
    return {str(name): bytes(value or b"").decode() for name, value in headers or []}
