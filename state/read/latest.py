"""The latest state per key read through Spark: what a changelog of ``_state`` rows amounts
to, for reads delta-rs does not serve and for readers outside a run."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..contract.entries import EntryColumns, value_json_column
from ..contract.types import key_columns, value_columns
from ..lake import tables
from ..layout import PipelineLayout


def latest_values(spark: SparkSession, layout: PipelineLayout, operator: str, as_of: int,
                   keys: list[str] | None = None) -> pd.DataFrame:
    """Latest ``key, value`` per key of ``operator`` up to checkpoint ``as_of`` (tombstones dropped)."""
    rows = (tables.read(spark, layout.state)
            .where((F.col("operator") == operator) & (F.col("checkpoint_id") <= as_of)))
    if keys is not None:
        rows = tables.only_keys(spark, rows, pd.DataFrame({"key": keys}))
    return latest_per_key(rows).where(~F.col("deleted")).select("key", "value").toPandas()


def stored_values(spark: SparkSession, layout: PipelineLayout, operators: list[str],
                  as_of: int | None, keys: DataFrame | None = None,
                  entries: Mapping[str, EntryColumns] | None = None) -> DataFrame:
    """The stored ``operator, key, value`` of ``operators`` as of checkpoint ``as_of`` (only
    those of ``keys``, a frame of encoded ``key``s, when given), as a lazy Spark DataFrame:
    executors read it, the driver never does. Empty before the first checkpoint. With
    ``entries`` (the columns of each state of many rows per key among ``operators``), an
    ``entry`` column too: an entry state's row's entry (its typed value in ``value`` as the
    JSON of its fields: :func:`~state.contract.entries.value_json`), else null."""
    schema = "operator string, key string, value string" + (", entry string" if entries else "")
    if as_of is None or not tables.exists(spark, layout.state):
        return spark.createDataFrame([], schema)
    rows = (tables.read(spark, layout.state)
            .where(F.col("operator").isin(operators) & (F.col("checkpoint_id") <= as_of)))
    if keys is not None:  # before the latest-per-key aggregation, which then sees only these
        rows = rows.join(keys, "key", "left_semi")
    latest = latest_per_key(rows).where(~F.col("deleted"))
    if not entries:
        return latest.select("operator", "key", "value")
    present = {name: columns for name, columns in entries.items()
               if {columns.entry, *columns.value_columns} <= set(latest.columns)}
    entry, value = F.lit(None).cast("string"), F.col("value")
    for name, columns in present.items():
        mine = F.col("operator") == name
        entry = F.when(mine, F.col(columns.entry)).otherwise(entry)
        value = F.when(mine, value_json_column(columns)).otherwise(value)
    return latest.select("operator", "key", value.alias("value"), entry.alias("entry"))


def latest_per_key(rows: DataFrame) -> DataFrame:
    """The newest changelog row of each (operator, key): what the state is after ``rows``.

    A typed state's rows leave ``key`` and ``value`` null and hold their key and value in
    typed columns (``k__…``, ``v__…``): a key is ``key`` and every typed key column together
    (Spark groups nulls as equal, so an untyped row is told apart by ``key`` alone, a typed
    one by its own columns), and its value is ``value`` and every typed value column."""
    keys = ["key", *key_columns(rows.columns)]
    values = ["value", *value_columns(rows.columns), "key_group"]
    newest = F.max_by(F.struct(*values, "deleted", "checkpoint_id"), "checkpoint_id").alias("last")
    return (rows.groupBy("operator", *keys).agg(newest)
            .select("operator", *keys, *(f"last.{column}" for column in values),
                    "last.deleted", "last.checkpoint_id"))
