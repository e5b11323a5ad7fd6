"""``sp.read.from_delta(path)``: the rows appended to an existing Delta table, by version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from state import PipelineLayout, appended, tables

from ..columns import FIRST_ORDINAL, ORDER_COLUMN
from ..context import RunContext
from ..errors import BadRecordError
from .base import REJECTED_COLUMNS, FrameSlice, Slice, Source, version_slices
from .records import RecordSchema

_BEFORE_FIRST_VERSION = -1  # a new pipeline reads a Delta source from its version 0


@dataclass(frozen=True)
class DeltaTableSource(Source):
    """An existing Delta table read incrementally by version through its change data feed.

    The table must have ``delta.enableChangeDataFeed=true`` (set when the table is created, or
    with ``ALTER TABLE … SET TBLPROPERTIES``). Rows inserted by commits ``(start, end]`` form a
    batch, ordered by commit version then ``order_by`` (default: every column), so a replay sees
    the same order; name a unique column in ``order_by`` when rows may tie. Plain appends are
    read straight from their files (see :mod:`state.appended`). Columns are already typed; rows
    with a null key go to dead letters.
    """

    name: str
    path: str
    schema: RecordSchema
    order_by: tuple[str, ...] = ()
    max_versions: int | None = None

    def columns(self) -> tuple[str, ...] | None:
        """The table's columns, read from its log when it is a local table that exists."""
        return tables.local_columns(self.path)

    def setup(self, ctx: RunContext) -> None:
        if not tables.exists(ctx.spark, self.path):
            raise BadRecordError(f"source {self.name!r}: no Delta table at {self.path}")

    def plan(self, ctx: RunContext, after: Any, limit: int) -> list[tuple[Any, Any]]:
        start = _BEFORE_FIRST_VERSION if after is None else int(after)
        return version_slices(start, tables.latest_version(self.path, ctx.spark), self.max_versions,
                               limit)

    def lag(self, ctx: RunContext, after: Any) -> int:
        start = _BEFORE_FIRST_VERSION if after is None else int(after)
        return tables.history_version(ctx.spark, self.path) - start

    def probe(self, layout: PipelineLayout, spark: SparkSession | None = None) -> str | None:
        version = tables.latest_version(self.path, spark)
        return str(version) if version >= 0 else None

    def read(self, ctx: RunContext, start: Any, end: Any) -> Slice:
        rows = appended.inserted_rows(ctx.spark, self.path, int(start) + 1, int(end),
                                      self.order_by).drop(columns=[appended.VERSION])
        keys = list(self.schema.key_fields)
        missing = rows[keys].isna().any(axis=1) if keys else pd.Series(False, index=rows.index)
        return Slice(good=rows[~missing], rejected=_null_keys(rows[missing], keys, start, end))

    def read_frame(self, ctx: RunContext, start: Any, end: Any) -> FrameSlice:
        """Read by executors from the change data feed, in the order :meth:`read` gives; only
        rows with a null key (dead letters) come to the driver."""
        changes = (ctx.spark.read.format("delta").option("readChangeFeed", "true")
                   .option("startingVersion", int(start) + 1).option("endingVersion", int(end))
                   .load(self.path).where(F.col("_change_type") == "insert"))
        columns = [c for c in changes.columns if not c.startswith("_")]
        order = [F.col("_commit_version"), *(F.col(c).asc_nulls_first()
                                             for c in (self.order_by or columns))]
        rows = changes.orderBy(*order).select(*columns)
        rows = rows.withColumn(ORDER_COLUMN, F.lit(FIRST_ORDINAL) + F.monotonically_increasing_id())
        keys = list(self.schema.key_fields)
        null_key = F.lit(False)
        for key in keys:
            null_key = null_key | F.col(key).isNull()
        # from the unsorted feed: a filtered scan, not a second sort of the batch
        bad: pd.DataFrame = changes.where(null_key).select("_commit_version", *columns).toPandas()
        bad = bad.sort_values(["_commit_version", *(self.order_by or columns)], kind="stable",
                              na_position="first").drop(columns=["_commit_version"])
        return FrameSlice(good=rows.where(~null_key), rejected=_null_keys(bad, keys, start, end))


def _null_keys(bad: pd.DataFrame, keys: list[str], start: Any, end: Any) -> pd.DataFrame:
    """Dead letters for rows of ``(start, end]`` whose key is null."""
    return pd.DataFrame({
        "position": [f"{start}..{end}"] * len(bad),
        "reason": [f"key field(s) {keys} null"] * len(bad),
        "raw": [row.to_json() for _, row in bad.iterrows()]},
        columns=REJECTED_COLUMNS)
