"""``.write.to_table(name)``: a state table (latest value per key) and its changelog.

The operator before the sink emits change rows (key columns, new values, ``_change``, ``_old``);
the sink appends them to ``<name>_changelog`` and upserts ``<name>``, both idempotent per batch,
so the table can always be rebuilt from the changelog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import NullType

from state import PipelineLayout, delta_io, fault_point
from state.lake import direct, tables

from ..columns import BATCH_COLUMN, CHANGE_COLUMN, OLD_COLUMN, ROW_COLUMN, WATERMARK_COLUMN
from ..context import RunContext
from .base import StoredSink

log = logging.getLogger(__name__)
#: What the changelog keeps and the table does not: the values a change replaced, a row's
#: position, a FINAL window's watermark (read by a window over the changelog).
CHANGELOG_ONLY = (OLD_COLUMN, ROW_COLUMN, WATERMARK_COLUMN)


def _typed_like(spark: SparkSession, frame: DataFrame, path: str) -> DataFrame:
    """``frame`` with the column types of the table at ``path`` (a batch whose values are all
    null, e.g. only deletes, must not change them); ``_old`` is always text. A column the table
    has as ``void`` (its first batch held only nulls there, untyped) keeps the batch's type:
    the write then gives the column that type (Delta merges ``void`` with any type)."""
    frame = frame.withColumn(OLD_COLUMN, F.col(OLD_COLUMN).cast("string"))
    if not tables.exists(spark, path):
        return frame
    types = {field.name: field.dataType for field in tables.read(spark, path).schema.fields
             if not isinstance(field.dataType, NullType)}
    return frame.select(*(F.col(c).cast(types[c]).alias(c) if c in types else F.col(c)
                          for c in frame.columns))


@dataclass(frozen=True)
class TableSink(StoredSink):
    """A state table: latest value per key in ``<name>``, every change in ``<name>_changelog``.

    Both writes are idempotent per batch: the changelog append carries Delta's transaction id,
    and the upsert only applies a change from a batch at least as new as the row it replaces.
    """

    name: str
    keys: tuple[str, ...]
    #: whether a batch holds at most one change per key; per-record emission holds several,
    #: and the table takes the last of each key's (the changelog keeps them all)
    coalesced: bool = True

    def location(self, layout: PipelineLayout) -> str:
        return layout.table(self.name)

    def changelog(self, layout: PipelineLayout) -> str:
        return layout.table(f"{self.name}_changelog")

    def tables(self, layout: PipelineLayout) -> list[str]:
        return [self.location(layout), self.changelog(layout)]

    def write(self, ctx: RunContext, batch_id: int, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        rows = frame.reset_index(drop=True).assign(**{ROW_COLUMN: range(len(frame))})
        if not self._write_directly(ctx, batch_id, rows):
            self.write_frame(ctx, batch_id, tables.to_frame(ctx.spark, rows))

    def _write_directly(self, ctx: RunContext, batch_id: int, rows: pd.DataFrame) -> bool:
        """The batch's changelog append and upsert committed by delta-rs, without Spark: a
        few hundredths of a second where Spark's ``MERGE`` took 2-3 s warm, and its first in
        a new JVM over 8 s. ``False`` when the tables or rows do not qualify (then both
        writes go through Spark; a changelog appended here is skipped there by its txn): a
        column the tables have as ``void`` (a first batch of nulls alone there) is given its
        type by Spark's writes."""
        changes = rows.assign(**{BATCH_COLUMN: batch_id, OLD_COLUMN: rows[OLD_COLUMN].astype("string")})
        appended = direct.append(changes, self.changelog(ctx.layout), create=direct.NewTable(),
                                 txn=ctx.txn(f"table/{self.name}", batch_id))
        if appended is None:
            return False
        fault_point("table_changelog_written")
        if not self.coalesced:  # the table takes each key's last change of the batch
            changes = changes.drop_duplicates(list(self.keys), keep="last")
        return direct.upsert(changes.drop(columns=list(CHANGELOG_ONLY), errors="ignore"),
                             self.location(ctx.layout),
                             self._how(), create=direct.NewTable()) is not None

    def write_frame(self, ctx: RunContext, batch_id: int, frame: DataFrame) -> None:
        rows = frame.withColumn(BATCH_COLUMN, F.lit(batch_id).cast("long"))
        changes = _typed_like(ctx.spark, rows, self.changelog(ctx.layout))
        tables.append(changes, self.changelog(ctx.layout), merge_schema=True,
                      txn=ctx.txn(f"table/{self.name}", batch_id))
        fault_point("table_changelog_written")
        if not self.coalesced:
            last = Window.partitionBy(*self.keys).orderBy(F.col(ROW_COLUMN).desc())
            changes = (changes.withColumn("_rank", F.row_number().over(last))
                       .where("_rank = 1").drop("_rank"))
        self._upsert(ctx.spark, ctx.layout, changes.drop(*CHANGELOG_ONLY))

    def _upsert(self, spark: SparkSession, layout: PipelineLayout, changes: DataFrame) -> None:
        """Spark's ``MERGE``, by the rule delta-rs's follows in driver mode (one rule, both
        engines: :class:`state.delta_io.Upsert`'s clauses are Spark SQL too)."""
        path = self.location(layout)
        if not tables.exists(spark, path):
            tables.ensure(spark, path, changes.drop(CHANGE_COLUMN).schema)
        how = self._how()
        values: dict[str, str | Column] = dict(how.assignments(changes.columns))
        (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), how.predicate())
         .withSchemaEvolution()  # a void column (see _typed_like) takes the batch's type
         .whenMatchedDelete(how.deleted_when())
         .whenMatchedUpdate(how.newer(), values)
         .whenNotMatchedInsert(how.inserted_when(), values)
         .execute())

    def _how(self) -> delta_io.Upsert:
        return delta_io.Upsert(self.keys, version=BATCH_COLUMN, change=CHANGE_COLUMN)

    def discard_after(self, ctx: RunContext, batch_id: int) -> None:
        tables.delete_where(ctx.spark, self.changelog(ctx.layout), F.col(BATCH_COLUMN) > batch_id)
        if tables.exists(ctx.spark, self.changelog(ctx.layout)):
            self.rebuild(ctx.spark, ctx.layout)

    def latest(self, changes: DataFrame) -> DataFrame:
        """The table that ``changes`` (changelog rows, as a Spark DataFrame) leave behind: the
        last change per key, deleted keys dropped, with each row's ``_batch_id``."""
        order = Window.partitionBy(*self.keys).orderBy(F.col(BATCH_COLUMN).desc(),
                                                       F.col(ROW_COLUMN).desc())
        return (changes.withColumn("_rank", F.row_number().over(order)).where("_rank = 1")
                .where(F.col(CHANGE_COLUMN) != "delete")
                .drop("_rank", CHANGE_COLUMN, *CHANGELOG_ONLY))

    def rebuild(self, spark: SparkSession, layout: PipelineLayout) -> int:
        """Recreate the table from its changelog (the latest change per key, deletes dropped),
        in one overwrite commit; returns the rows. Use it when the table was lost or damaged."""
        latest = self.latest(tables.read(spark, self.changelog(layout))).localCheckpoint()
        latest.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
            self.location(layout))
        count = latest.count()
        log.info("rebuilt %s from its changelog: %d rows", self.location(layout), count)
        return count

    def read(self, spark: SparkSession, layout: PipelineLayout) -> pd.DataFrame:
        """The table's current rows, ordered by key."""
        if not tables.exists(spark, self.location(layout)):
            return self.empty()
        return tables.read(spark, self.location(layout)).orderBy(*self.keys).toPandas()

    def empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=list(self.keys))
