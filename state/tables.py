"""The few Delta Lake operations the state engine needs, in one place."""

from __future__ import annotations

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds a Delta table."""
    return DeltaTable.isDeltaTable(spark, path)


def ensure(spark: SparkSession, path: str, schema: StructType, *,
           partition_by: tuple[str, ...] = (), properties: dict[str, str] | None = None) -> None:
    """Create an empty Delta table at ``path`` unless one is there (safe when two runs race)."""
    if exists(spark, path):
        return
    writer = spark.createDataFrame([], schema).write.format("delta").mode("append")
    for key, value in (properties or {}).items():
        writer = writer.option(key, value)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        writer.save(path)
    except Exception:
        if not exists(spark, path):  # losing the creation race is fine; anything else is not
            raise


def read(spark: SparkSession, path: str) -> DataFrame:
    """The latest version of the table at ``path``."""
    return spark.read.format("delta").load(path)


def to_frame(spark: SparkSession, rows: pd.DataFrame, schema: StructType) -> DataFrame:
    """A Spark DataFrame from pandas rows (through Arrow), with an exact schema."""
    return spark.createDataFrame(rows, schema=schema)


def append(frame: DataFrame, path: str, *, txn: tuple[str, int] | None = None,
           partition_by: tuple[str, ...] = (), user_metadata: str | None = None) -> None:
    """Append ``frame`` to ``path`` in one commit.

    With ``txn=(app_id, version)`` the write is idempotent: Delta skips it when the table has
    already seen ``version`` (or a later one) for ``app_id``. That is how a replayed batch writes
    nothing new.
    """
    writer = frame.write.format("delta").mode("append")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    if user_metadata is not None:
        writer = writer.option("userMetadata", user_metadata)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)
