"""Large pandas batches reach Delta through a staged Parquet file; the table must read exactly as
if Spark had converted the rows itself, and everything else must still take Spark's path."""

import os

import numpy as np
import pandas as pd

from state.lake import tables

ROWS = 60_000  # above the staging threshold


def plain_rows(n: int = ROWS) -> pd.DataFrame:
    ints = pd.array([None if i % 7 == 0 else i for i in range(n)], dtype="Int64")
    return pd.DataFrame({
        "k": np.arange(n, dtype=np.int64), "maybe": ints,
        "x": np.where(np.arange(n) % 5 == 0, np.nan, np.arange(n) / 4),
        "s": [None if i % 3 == 0 else f"s{i}" for i in range(n)],
        "flag": np.arange(n) % 2 == 0,
        "ts": pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.arange(n), unit="ms")})


def test_rows_read_back_as_spark_would_have_converted_them(spark, tmp_path):
    """Both ways around Spark's own conversion: a table created by a direct commit, and rows
    staged through a Parquet file into a table direct commits must leave to Spark (it has a
    CHECK constraint)."""
    rows, staging = plain_rows(), str(tmp_path / "_staging")
    assert tables._stage(rows, str(tmp_path / "probe")) is not None   # it takes the staged path
    tables.append(tables.to_frame(spark, rows), str(tmp_path / "spark"))
    tables.append_rows(spark, rows, str(tmp_path / "created"), staging=staging)
    assert not os.path.exists(staging)                                 # committed directly
    tables.append(tables.to_frame(spark, rows.iloc[1:2]), str(tmp_path / "staged"))  # no nulls
    spark.sql(f"ALTER TABLE delta.`{tmp_path / 'staged'}` ADD CONSTRAINT k_known CHECK (k >= 0)")
    tables.append_rows(spark, rows.drop(index=1), str(tmp_path / "staged"), staging=staging)

    converted = tables.read(spark, str(tmp_path / "spark"))
    for other in ("created", "staged"):
        table = tables.read(spark, str(tmp_path / other))
        assert table.schema == converted.schema, other
        assert table.orderBy("k").toPandas().equals(converted.orderBy("k").toPandas()), other
    assert os.listdir(staging) == []                         # the staged file is gone


def test_staged_append_is_idempotent_by_transaction_id(spark, tmp_path):
    path, staging = str(tmp_path / "sink"), str(tmp_path / "_staging")
    for _ in range(2):
        tables.append_rows(spark, plain_rows(), path, staging=staging, txn=("p/sink", 1))
    assert tables.read(spark, path).count() == ROWS


def test_other_rows_take_sparks_own_conversion(spark, tmp_path):
    staging = str(tmp_path / "_staging")
    lists = pd.DataFrame({"k": np.arange(ROWS), "xs": [[i] for i in range(ROWS)]})
    assert tables._stage(lists, staging) is None                       # not a plain type
    assert tables._stage(plain_rows(10), staging) is None              # too small to be worth it
    assert tables._stage(plain_rows(), "s3a://bucket/p/_staging") is None   # not a local folder
    tables.append_rows(spark, lists, str(tmp_path / "lists"), staging=staging)
    assert tables.read(spark, str(tmp_path / "lists")).where("k = 5").first()["xs"] == [5]
