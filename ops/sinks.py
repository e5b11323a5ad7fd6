"""Sinks: where a batch's output goes. Every write is idempotent by batch id."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass

import pandas as pd

from pyspark.sql import SparkSession, functions as F

from state import PipelineLayout, tables

from ._context import RunContext

BATCH_COLUMN = "_batch_id"
ROW_COLUMN = "_row"


class Sink(ABC):
    """Receives each batch's output frame."""

    name: str

    @abstractmethod
    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        """Write ``frame`` for ``batch_id``; a second call for the same batch adds nothing."""

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        """Remove what batches after ``batch_id`` wrote (a reset abandoned them); a sink that
        cannot take output back does nothing."""


@dataclass(frozen=True)
class ConsoleSink(Sink):
    """Prints each batch. A replayed batch prints again (the console cannot be un-printed)."""

    name: str = "console"

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        print(f"[{ctx.pipeline}] batch {batch_id}:")
        print(frame.to_string(index=False), flush=True, file=sys.stdout)


@dataclass(frozen=True)
class DeltaSink(Sink):
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
        rows = frame.reset_index(drop=True).assign(
            **{BATCH_COLUMN: batch_id, ROW_COLUMN: range(len(frame))})
        tables.append_rows(ctx.spark, rows, self.location(ctx.layout), staging=ctx.layout.staging,
                           txn=ctx.txn(f"sink/{self.name}", batch_id))

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        tables.delete_where(ctx.spark, self.location(ctx.layout), F.col(BATCH_COLUMN) > batch_id)

    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """Everything written so far, in batch and row order (empty before the first write)."""
        if not tables.exists(spark, self.location(layout)):
            return pd.DataFrame()
        return tables.read(spark, self.location(layout)).orderBy(BATCH_COLUMN, ROW_COLUMN).toPandas()
