"""The generated stream where each engine reads it: three Delta tables (``person``,
``auction``, ``bid``) with one commit per batch for lakestream and Spark, the same rows as
one Parquet file per kind and batch for the peers, and, for the continuous form, as JSON
records on a Kafka topic per kind (:func:`write_topics`).

>>> paths = StreamPaths("/data/nexmark")
>>> paths.delta("bid"), paths.files("bid")
('/data/nexmark/delta/bid', '/data/nexmark/files/bid')
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

from bench.nexmark.generator import Events, NexmarkConfig, generate

KINDS = ("person", "auction", "bid")


@dataclass(frozen=True)
class StreamPaths:
    """Where a generated stream lives under ``folder``."""

    folder: str

    def delta(self, kind: str) -> str:
        return os.path.join(self.folder, "delta", kind)

    def files(self, kind: str) -> str:
        return os.path.join(self.folder, "files", kind)


def write_stream(folder: str, config: NexmarkConfig, batches: int, size: int) -> list[Events]:
    """Generate ``batches`` batches of ``size`` events and write each kind's rows as one Delta
    commit per batch (delta-rs, change data feed on: no JVM for the input) and one Parquet file
    per batch; the batches, for an oracle to read."""
    paths = StreamPaths(folder)
    made = [generate(config, batch, size) for batch in range(batches)]
    for kind in KINDS:
        os.makedirs(paths.files(kind), exist_ok=True)
        for batch, events in enumerate(made):
            rows = pa.Table.from_pandas(getattr(events, kind), preserve_index=False)
            rows = rows.cast(pa.schema([_in_microseconds(field) for field in rows.schema]))
            write_deltalake(paths.delta(kind), rows, mode="append",
                            configuration={"delta.enableChangeDataFeed": "true"})
            pq.write_table(rows, os.path.join(paths.files(kind), f"batch-{batch:05d}.parquet"))
    side = side_input()
    write_deltalake(paths.delta("side_input"), pa.Table.from_pandas(side, preserve_index=False),
                    mode="overwrite", configuration={"delta.enableChangeDataFeed": "true"})
    os.makedirs(paths.files("side_input"), exist_ok=True)
    side.to_csv(os.path.join(paths.files("side_input"), "side_input.csv"), index=False)
    return made


def write_topics(bootstrap: str, batches: list[Events], prefix: str = "nexmark") -> dict[str, str]:
    """Each kind's rows as JSON records on topic ``<prefix>-<kind>`` (one partition, so in
    event order; instants as ISO-8601 text), a batch at a time; the topics by kind."""
    from ops.kafka_client.topics import create_topic, send_json

    topics = {kind: f"{prefix}-{kind}" for kind in KINDS}
    for kind, topic in topics.items():
        create_topic(bootstrap, topic, partitions=1)
        for events in batches:
            rows = getattr(events, kind)
            sent = send_json(bootstrap, topic, _json_ready(rows).to_dict("records"))
            if sent != len(rows):
                raise RuntimeError(f"{topic}: {sent} of {len(rows)} records acknowledged")
    return topics


def record_schema(kind: str) -> dict[str, str]:
    """The JSON records' fields of ``kind`` and their types, as a Kafka source declares them."""
    rows = generate(NexmarkConfig(seed=0), 0, 50)
    return {column: _KIND_OF.get(rows.dtype.kind, "string")
            for column, rows in getattr(rows, kind).items()}


_KIND_OF = {"i": "long", "u": "long", "f": "double", "b": "boolean", "M": "timestamp"}


def _json_ready(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.copy()
    for column in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[column].dtype):
            out[column] = out[column].map(lambda t: t.isoformat())
        elif pd.api.types.is_integer_dtype(out[column].dtype):
            out[column] = out[column].astype(object)  # Python ints: json cannot take numpy's
    return out


def side_input(keys: int = 10_000) -> pd.DataFrame:
    """q13's static table: ``key`` 0 … ``keys - 1`` and its ``value`` (the key as text), as
    the nexmark repository's side-input file has them."""
    return pd.DataFrame({"key": range(keys), "value": [str(key) for key in range(keys)]})


def _in_microseconds(field: pa.Field) -> pa.Field:
    """A timestamp field in microseconds, UTC: Delta's ``timestamp`` (nanoseconds it has not)."""
    if pa.types.is_timestamp(field.type):
        return field.with_type(pa.timestamp("us", tz="UTC"))
    return field


def all_of(batches: list[Events], kind: str) -> pd.DataFrame:
    """Every batch's rows of one kind, in event order."""
    return pd.concat([getattr(events, kind) for events in batches], ignore_index=True)
