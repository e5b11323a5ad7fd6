"""The generated stream where each engine reads it: three Delta tables (``person``,
``auction``, ``bid``) with one commit per batch for lakestream and Spark, and the same rows as
one Parquet file per kind and batch for the peers.

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
