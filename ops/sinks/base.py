"""The Sink interface: where a batch's output goes, and what the runtime may ask of it.

What the runtime calls, in order: ``write(ctx, batch_id, frame)`` once per batch (in
distributed mode ``write_frame``, with a Spark DataFrame), batches in order, after the previous
batch's ``write`` returned and before the checkpoint covering the batch commits. A batch that
crashed is written again on replay with identical rows, so a ``write`` must be idempotent by
batch id: a second call for the same batch adds nothing.

``close(ctx)`` is called once when the run ends, however it ends, to release what the sink
held for it (connections, producers).

``discard_after(ctx, batch_id)`` is called during recovery after a reset to an older
checkpoint, before any batch runs, and may be called again if that recovery crashes.

A :class:`StoredSink` keeps its output in Delta tables and can be read back; the others (the
console) cannot.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from state import PipelineLayout

from ..columns import ROW_COLUMN
from ..context import RunContext


class Sink(ABC):
    """Receives each batch's output frame."""

    name: str

    @abstractmethod
    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        """Write ``frame`` for ``batch_id``; a second call for the same batch adds nothing."""

    def write_frame(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        """Distributed mode: write ``frame`` (a Spark DataFrame, rows already tagged with their
        order in ``_row``) for ``batch_id``, idempotently as :meth:`write`. This default brings
        the rows to the driver; sinks that can write from executors override it."""
        rows: pd.DataFrame = frame.toPandas()
        self.write(ctx, batch_id, rows.sort_values(ROW_COLUMN).drop(columns=[ROW_COLUMN]))

    def close(self, ctx: RunContext) -> None:  # noqa: B027 - optional
        """The run is over: release what was held for it."""

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:  # noqa: B027 - optional
        """Remove what batches after ``batch_id`` wrote (a reset abandoned them); a sink that
        cannot take output back does nothing."""


class StoredSink(Sink):
    """A sink whose output is stored in Delta tables of the warehouse and can be read back."""

    @abstractmethod
    def location(self, layout: PipelineLayout) -> str:
        """The path of the table a reader queries."""

    def tables(self, layout: PipelineLayout) -> list[str]:
        """Every table the sink writes (vacuum and describe visit them)."""
        return [self.location(layout)]

    @abstractmethod
    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """What the sink holds now, as pandas (empty before the first write)."""
