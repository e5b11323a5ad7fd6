"""The latest state per key read through Spark: what a changelog of ``_state`` rows amounts
to, for reads delta-rs does not serve and for readers outside a run."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

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
                  entries: Mapping[str, str] | None = None) -> DataFrame:
    """The stored ``operator, key, value`` of ``operators`` as of checkpoint ``as_of`` (only
    those of ``keys``, a frame of encoded ``key``s, when given), as a lazy Spark DataFrame:
    executors read it, the driver never does. Empty before the first checkpoint. With
    ``entries`` (the entry column of each state of many rows per key among ``operators``), an
    ``entry`` column too: an entry state's row's entry, else null."""
    columns = "operator string, key string, value string" + (", entry string" if entries else "")
    if as_of is None or not tables.exists(spark, layout.state):
        return spark.createDataFrame([], columns)
    rows = (tables.read(spark, layout.state)
            .where(F.col("operator").isin(operators) & (F.col("checkpoint_id") <= as_of)))
    if keys is not None:  # before the latest-per-key aggregation, which then sees only these
        rows = rows.join(keys, "key", "left_semi")
    latest = latest_per_key(rows).where(~F.col("deleted"))
    if not entries:
        return latest.select("operator", "key", "value")
    stored = [F.when(F.col("operator") == name, F.col(column)) for name, column in entries.items()
              if column in latest.columns]
    entry = F.coalesce(*stored) if stored else F.lit(None).cast("string")
    return latest.select("operator", "key", "value", entry.alias("entry"))


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
