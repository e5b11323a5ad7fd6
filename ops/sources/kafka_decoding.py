"""A Kafka record decoded into a row of its source: the value's fields (a JSON object, the
UTF-8 text in ``value``, or a schema registry format's record) checked against the schema,
plus the metadata columns every Kafka row carries; a record that does not decode or check
becomes a dead letter. The same decoding runs on the driver (one consumer's messages) and on
executors (Spark's Kafka rows, through :class:`SparkDecoder`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..columns import KAFKA_KEY
from ..kafka_client.serde import RegistryDecoder
from .records import RecordSchema, parse_payload


@dataclass(frozen=True)
class KafkaRecordDecoder:
    """Decodes and checks the records of one Kafka source (``value_format``: ``"json"``,
    ``"string"``, or a registry format, which ``registry`` decodes) against its ``schema``."""

    schema: RecordSchema
    value_format: str
    registry: RegistryDecoder | None = None

    def decode(self, part: str, message: Any, rows: list[dict[str, Any]],
               rejected: list[dict[str, Any]]) -> None:
        """One message as a checked row, or a dead letter naming ``topic:partition@offset``."""
        position = f"{part}@{message.offset()}"
        value = message.value()
        try:
            record = self.record(message.key(), value, message.topic(), message.partition(),
                                 message.offset(), message.timestamp()[1])
            rows.append(self.checked(record))
        except ValueError as error:
            rejected.append({"position": position, "reason": str(error),
                             "raw": _printable(value)})

    def record(self, key: bytes | None, value: bytes | None, topic: str, partition: int,
               offset: int, timestamp_ms: int) -> dict[str, Any]:
        """A message's fields and metadata; ``ValueError`` says what is wrong with it."""
        if value is None:
            raise ValueError("record has no value (a tombstone)")
        if self.registry is not None:
            record = self.registry.decode(value, topic)
        else:
            text = _utf8(value, "value")
            record = ({"value": text} if self.value_format == "string" else parse_payload(text))
        if not isinstance(record, dict):
            raise ValueError(f"record is a JSON {type(record).__name__}, not an object")
        return {**record, KAFKA_KEY: None if key is None else _utf8(key, "key"), "_topic": topic,
                "_partition": partition, "_offset": offset,
                "_timestamp": pd.Timestamp(timestamp_ms, unit="ms", tz="UTC")}

    def checked(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` checked against the schema; its timestamp, already typed by
        :meth:`record`, is not converted a second time (a third of the decoding time)."""
        stamp = record.pop("_timestamp")
        row = self.schema.check(record)
        row["_timestamp"] = stamp
        return row


class SparkDecoder:
    """The source's decoding and checks, run by ``mapInPandas`` over Spark's Kafka rows."""

    def __init__(self, decoder: KafkaRecordDecoder, columns: list[str]):
        self.decoder, self.columns = decoder, columns

    def __call__(self, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for chunk in chunks:
            rows, reasons, raws = [], [], []
            for key, value, topic, partition, offset, stamp in zip(
                    chunk["key"], chunk["value"], chunk["topic"], chunk["partition"],
                    chunk["offset"], chunk["timestamp"]):
                millis = int(pd.Timestamp(stamp).timestamp() * 1000)
                try:
                    record = self.decoder.record(key, value, topic, int(partition), int(offset), millis)
                    row, reason, raw = self.decoder.checked(record), None, None
                except ValueError as error:
                    row = {"_topic": topic, "_partition": int(partition), "_offset": int(offset)}
                    reason, raw = str(error), _printable(value)
                rows.append(row)
                reasons.append(reason)
                raws.append(raw)
            frame = pd.DataFrame.from_records(rows, columns=self.columns) if rows else \
                pd.DataFrame(columns=self.columns)
            if any(reason is not None for reason in reasons):
                # a rejected row's missing fields are NaN, which Arrow cannot take as a long
                # or a timestamp: nulls as None in object columns convert to any type
                frame = frame.astype(object).where(frame.notna(), None)
            yield frame.assign(__reason=reasons, __raw=raws)


def _utf8(data: bytes, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"record {what} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def _printable(value: bytes | None) -> str:
    """A rejected record's value as text for dead letters (undecodable bytes escaped)."""
    return "" if value is None else bytes(value).decode("utf-8", errors="backslashreplace")
