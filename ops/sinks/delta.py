"""``.write.to_delta(name)``: append each batch to a Delta table, idempotently."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from state import PipelineLayout, delta_io
from state.lake import tables

from ..columns import BATCH_COLUMN, ROW_COLUMN
from ..context import RunContext
from ..errors import SinkError
from .base import FileSink, FileTarget, StoredSink

# Delta's error for an append whose column does not merge with the table's of that name
_MERGE_CLASH = re.compile(r"DELTA_FAILED_TO_MERGE_FIELDS\] Failed to merge fields '([^']+)'")


@dataclass(frozen=True)
class DeltaSink(StoredSink, FileSink):
    """Appends each batch to a Delta table, with ``_batch_id`` and ``_row`` (order in the batch).

    ``path`` defaults to ``<warehouse>/<pipeline>/<name>``. The write uses Delta's idempotent
    transaction id, so a replayed batch writes nothing new. A column the output gains (a
    source's new field) is added to the table; one whose type changes stops the batch with a
    :class:`~ops.errors.SinkError` naming it.
    """

    name: str
    path: str | None = None

    def location(self, layout: PipelineLayout) -> str:
        return self.path or layout.table(self.name)

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        rows = frame.assign(**{BATCH_COLUMN: batch_id, ROW_COLUMN: np.arange(len(frame))})
        rows.index = pd.RangeIndex(len(rows))  # renumbered in place: the copy is assign's alone
        with self._typed_alike(ctx, batch_id):
            tables.append_rows(ctx.spark, rows, self.location(ctx.layout),
                               staging=ctx.layout.staging, merge_schema=True,
                               txn=ctx.txn(f"sink/{self.name}", batch_id))

    def write_frame(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        with self._typed_alike(ctx, batch_id):
            tables.append(frame.withColumn(BATCH_COLUMN, F.lit(batch_id).cast("long")),
                          self.location(ctx.layout), merge_schema=True,
                          txn=ctx.txn(f"sink/{self.name}", batch_id))

    def file_target(self, ctx: RunContext) -> FileTarget | None:
        """The table, once it exists, unpartitioned, when delta-rs appends to it (its first
        write, one that adds a column, and a partitioned table's are Spark's)."""
        path = self.location(ctx.layout)
        schema = delta_io.file_schema(path, partitioned=False)
        if schema is None or {BATCH_COLUMN, ROW_COLUMN} - set(schema.names):
            return None
        return FileTarget(self.name, path, schema, delta_io.storage_environment(path))

    def commit_files(self, ctx: RunContext, target: FileTarget, batch_id: int,
                     actions: list[str]) -> None:
        delta_io.commit_files(target.path, actions, target.schema,
                              txn=ctx.txn(f"sink/{self.name}", batch_id))

    @contextmanager
    def _typed_alike(self, ctx: RunContext, batch_id: int) -> Iterator[None]:
        """A column whose type the batch changes: a :class:`SinkError` naming it."""
        try:
            yield
        except Exception as exc:
            clash = _MERGE_CLASH.search(str(exc)[:2000])
            if clash is None:
                raise
            raise SinkError(
                f"pipeline {ctx.pipeline!r}, sink {self.name!r}, batch {batch_id}: column "
                f"{clash.group(1)!r} of the batch's rows has another type than the table "
                f"{self.location(ctx.layout)} holds; nothing of the batch was committed. Cast "
                "it in the pipeline to the table's type, or write to a new sink.") from exc

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        tables.delete_where(ctx.spark, self.location(ctx.layout), F.col(BATCH_COLUMN) > batch_id)

    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """Everything written so far, in batch and row order (empty before the first write)."""
        if not tables.exists(spark, self.location(layout)):
            return self.empty()
        return tables.read(spark, self.location(layout)).orderBy(BATCH_COLUMN, ROW_COLUMN).toPandas()

    def empty(self) -> pd.DataFrame:
        return pd.DataFrame({BATCH_COLUMN: pd.Series(dtype="int64"), ROW_COLUMN: pd.Series(dtype="int64")})
