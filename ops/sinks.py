"""Sinks: where a batch's output goes. Every write is idempotent by batch id."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass

import pandas as pd

from state import tables

from ._context import RunContext

BATCH_COLUMN = "_batch_id"
ROW_COLUMN = "_row"


class Sink(ABC):
    """Receives each batch's output frame."""

    name: str

    @abstractmethod
    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        """Write ``frame`` for ``batch_id``; a second call for the same batch adds nothing."""


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

    def location(self, ctx: RunContext) -> str:
        return self.path or ctx.layout.table(self.name)

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        rows = frame.reset_index(drop=True).assign(
            **{BATCH_COLUMN: batch_id, ROW_COLUMN: range(len(frame))})
        tables.append(tables.to_frame(ctx.spark, rows), self.location(ctx),
                      txn=ctx.txn(f"sink/{self.name}", batch_id))

    def read(self, ctx: RunContext) -> pd.DataFrame:
        """Everything written so far, in batch and row order."""
        if not tables.exists(ctx.spark, self.location(ctx)):
            return pd.DataFrame()
        return tables.read(ctx.spark, self.location(ctx)).orderBy(BATCH_COLUMN, ROW_COLUMN).toPandas()
