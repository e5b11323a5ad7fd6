"""The Source interface: a replayable input, read in bounded slices addressed by position.

What the runtime calls, in order:

1. ``setup(ctx)`` once per run, before recovery finishes (create what the source needs;
   idempotent).
2. ``plan(ctx, after, limit)`` when the run needs new batches: up to ``limit`` consecutive
   ``(start, end]`` slices after position ``after``. The runtime records them in the batch plans
   before reading any, so a slice never changes once planned. Not called for a batch whose plan
   a crashed run left behind: that plan is reused. So a slice the source could not read must be
   refused here (raise, or plan only the slices before it), not at ``read``: a recorded plan
   fails every later run until ``ops.discard_plans`` discards it.
3. ``read(ctx, start, end)`` (``read_frame`` in distributed mode) once per batch attempt:
   exactly the records of ``(start, end]``, in the same order every time (a replay reads the
   same slice again), split into good rows and rejected ones with reasons (dead letters).

``lag`` and ``probe`` are asked from outside runs (describe, sensors); positions are JSON values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from state import PipelineLayout
from state.lake import tables

from ..columns import FIRST_ORDINAL, ORDER_COLUMN
from ..context import RunContext
from .records import RecordSchema

#: Columns of a slice's rejected records (dead letters add the batch and source).
REJECTED_COLUMNS = ["position", "reason", "raw"]


@dataclass(frozen=True)
class Slice:
    """Records read for one batch: ``good`` rows in source order and ``rejected`` ones with reasons."""

    good: pd.DataFrame
    rejected: pd.DataFrame  # columns: REJECTED_COLUMNS

    @staticmethod
    def no_rejects() -> pd.DataFrame:
        return pd.DataFrame(columns=REJECTED_COLUMNS)


@dataclass(frozen=True)
class FrameSlice:
    """Records read for one batch in distributed mode: ``good`` rows as a Spark DataFrame with
    their source order in ``__order``, and ``rejected`` ones with reasons (few: pandas)."""

    good: DataFrame
    rejected: pd.DataFrame

    @classmethod
    def of(cls, spark: SparkSession, sliced: Slice) -> FrameSlice:
        """``sliced``'s rows handed to Spark, numbered in order."""
        ordinals = np.arange(FIRST_ORDINAL, FIRST_ORDINAL + len(sliced.good), dtype="int64")
        good = sliced.good.reset_index(drop=True).assign(**{ORDER_COLUMN: ordinals})
        return cls(tables.to_frame(spark, good), sliced.rejected)

    @classmethod
    def empty(cls, spark: SparkSession, schema: RecordSchema) -> FrameSlice:
        """No rows (a batch run for its timers), with the columns ``schema`` declares."""
        fields = [*schema.spark_schema().fields, StructField(ORDER_COLUMN, LongType())]
        return cls(spark.createDataFrame([], StructType(fields)), Slice.no_rejects())


class Source(ABC):
    """A replayable input. Positions are JSON values; a batch reads ``(start, end]``."""

    name: str
    schema: RecordSchema

    @property
    def parts(self) -> tuple[Source, ...]:
        """The sources this one reads: itself, or those a merged source combines."""
        return (self,)

    def tables(self, layout: PipelineLayout) -> list[str]:
        """Tables of the pipeline's own that this source keeps (inboxes, manifests)."""
        return []

    def columns(self) -> tuple[str, ...] | None:
        """The columns its rows have, when known before it runs (``sp.sql`` checks names
        against them): the schema's fields and key; ``None`` when it declares none."""
        declared = dict.fromkeys([*self.schema.fields, *self.schema.key_fields])
        return tuple(declared) or None

    def kinds(self) -> dict[str, str]:
        """Column -> declared kind (``long``, ``timestamp``…) of its rows, where known before it
        runs: the schema's fields (a Delta table's source adds the table's own types)."""
        return dict(self.schema.fields)

    @abstractmethod
    def setup(self, ctx: RunContext) -> None:
        """Create what the source needs (idempotent)."""

    @abstractmethod
    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        """Up to ``limit`` consecutive slices after position ``after`` (``None``: from the
        beginning); empty when nothing new is there."""

    @abstractmethod
    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        """Exactly the records of ``(start, end]``, in order, validated."""

    def with_rowtime(self) -> tuple[Source, str] | None:
        """This source with its records' own time in a column (ksqlDB's ``ROWTIME``), and that
        column's name; ``None`` when its records have no time of their own."""
        return None

    def read_frame(self, ctx: RunContext, start: Any, end: Any) -> FrameSlice:
        """:meth:`read` for distributed mode, as a Spark DataFrame. This default reads on the
        driver and hands the rows to Spark; sources that Spark can read directly override it."""
        return FrameSlice.of(ctx.spark, self.read(ctx, start, end))

    @abstractmethod
    def lag(self, ctx: RunContext, after: Any) -> int:
        """How far the input is ahead of position ``after`` (versions or files not processed)."""

    @property
    def lag_needs_spark(self) -> bool:
        """Whether :meth:`lag` runs a Spark job (a run's metrics then never ask it: they ask
        every few seconds, between batches)."""
        return False

    def lag_by_part(self, ctx: RunContext, after: Any) -> dict[str, int]:
        """:meth:`lag` per part of the input (a Kafka source: per partition); one part, the
        source itself, unless a source says otherwise."""
        return {self.name: self.lag(ctx, after)}

    def unread(self, after: Any) -> dict[str, int] | None:
        """Per part, how much input is past position ``after`` (a checkpoint's), asked by
        sensors without Spark; ``None`` when the source cannot tell that way (the sensor then
        compares :meth:`probe` tokens)."""
        return None

    @abstractmethod
    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        """A token that changes whenever new input arrives (for sensors); ``None`` while there
        is no input at all. Local paths are probed without Spark; other URIs need ``spark``."""


def version_slices(start: int, latest: int, step: int | None,
                    limit: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, end]`` version ranges of at most ``step`` versions up to ``latest``."""
    slices: list[tuple[int, int]] = []
    while start < latest and len(slices) < limit:
        end = latest if step is None else min(latest, start + step)
        slices.append((start, end))
        start = end
    return slices
