"""``.write.to_delta(name)``: append each batch to a Delta table, idempotently."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from state import PipelineLayout, tables

from ..columns import BATCH_COLUMN, ROW_COLUMN
from ..context import RunContext
from .base import StoredSink


@dataclass(frozen=True)
class DeltaSink(StoredSink):
    """Appends each batch to a Delta table, with ``_batch_id`` and ``_row`` (order in the batch).

    ``path`` defaults to ``<warehouse>/<pipeline>/<name>``. The write uses Delta's idempotent
    transaction id, so a replayed batch writes nothing new.
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
        tables.append_rows(ctx.spark, rows, self.location(ctx.layout), staging=ctx.layout.staging,
                           txn=ctx.txn(f"sink/{self.name}", batch_id))

    def write_frame(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        tables.append(frame.withColumn(BATCH_COLUMN, F.lit(batch_id).cast("long")),
                      self.location(ctx.layout),
                      txn=ctx.txn(f"sink/{self.name}", batch_id))

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        tables.delete_where(ctx.spark, self.location(ctx.layout), F.col(BATCH_COLUMN) > batch_id)

    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """Everything written so far, in batch and row order (empty before the first write)."""
        if not tables.exists(spark, self.location(layout)):
            return pd.DataFrame()
        return tables.read(spark, self.location(layout)).orderBy(BATCH_COLUMN, ROW_COLUMN).toPandas()
