"""Topic helpers for examples, tests and benchmarks: create a topic, send JSON records, read a
topic back. Pipelines never call these; they read and write through the Kafka source and sink."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SourceError
from .connection import DEFAULT_TIMEOUT, connection, parse_part, part_id


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


def read_topic(bootstrap: str, topic: str, timeout: float = DEFAULT_TIMEOUT,
               raw: bool = False) -> list[dict[str, Any]]:
    """Every committed record of ``topic`` (``isolation.level=read_committed``), in partition
    then offset order: ``key``, ``value`` (text; ``raw=True``: bytes, for registry formats),
    ``partition``, ``offset`` and ``headers`` (a dict). What an exactly-once consumer sees;
    for tests and examples."""
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
                                "value": None if value is None else
                                bytes(value) if raw else bytes(value).decode(),
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
