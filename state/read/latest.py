"""The latest state per key read through Spark: what a changelog of ``_state`` rows amounts
to, for reads delta-rs does not serve and for readers outside a run."""

from __future__ import annotations

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
                  as_of: int | None, keys: DataFrame | None = None) -> DataFrame:
    """The stored ``operator, key, value`` of ``operators`` as of checkpoint ``as_of`` (only
    those of ``keys``, a frame of encoded ``key``s, when given), as a lazy Spark DataFrame:
    executors read it, the driver never does. Empty before the first checkpoint."""
    if as_of is None or not tables.exists(spark, layout.state):
        return spark.createDataFrame([], "operator string, key string, value string")
    rows = (tables.read(spark, layout.state)
            .where(F.col("operator").isin(operators) & (F.col("checkpoint_id") <= as_of)))
    if keys is not None:  # before the latest-per-key aggregation, which then sees only these
        rows = rows.join(keys, "key", "left_semi")
    return latest_per_key(rows).where(~F.col("deleted")).select("operator", "key", "value")


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
