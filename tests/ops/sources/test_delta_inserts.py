"""Rows inserted by a range of commits: plain appends are read from their Parquet files (by
pyarrow on the driver, by Spark on executors: the same rows in the same order, the table's own),
anything else through the change data feed; every way gives the same rows and dtypes."""

import datetime
import decimal
import os

import pandas as pd
import pytest
from delta.tables import DeltaTable
from pyspark.sql import types as T

from ops.sources import delta_inserts
from state.lake import tables

SCHEMA = T.StructType([
    T.StructField("k", T.LongType()), T.StructField("i", T.IntegerType()),
    T.StructField("x", T.DoubleType()), T.StructField("s", T.StringType()),
    T.StructField("flag", T.BooleanType()), T.StructField("ts", T.TimestampType()),
    T.StructField("day", T.DateType()), T.StructField("seq", T.LongType()),
])
CDF = {"delta.enableChangeDataFeed": "true"}


def commit(spark, path: str, first: int, n: int) -> None:
    """One append of ``n`` rows of every supported type, nulls included, out of order."""
    rows = [(k % 3 if k % 4 else None, k if k % 5 else None, k / 4 if k % 6 else None,
             f"s{k}" if k % 7 else None, bool(k % 2) if k % 8 else None,
             datetime.datetime(2026, 1, 1, 12, 0, k % 60) if k % 9 else None,
             datetime.date(2026, 1, 1 + k % 28) if k % 10 else None, k)
            for k in reversed(range(first, first + n))]
    spark.createDataFrame(rows, SCHEMA).coalesce(2).write.format("delta").mode("append").save(path)


@pytest.fixture
def appends(spark, tmp_path):
    path = str(tmp_path / "events")
    tables.ensure(spark, path, SCHEMA, properties=CDF)           # version 0: the empty table
    for version in range(1, 4):
        commit(spark, path, 100 * version, 40)
    return path


def via_change_feed(spark, path, first, last, order_by=()):
    rows = delta_inserts._from_change_feed(spark, path, first, last)
    keys = [delta_inserts.VERSION, *(order_by or SCHEMA.names)]
    return rows.sort_values(keys, kind="stable", na_position="first").reset_index(drop=True)


def in_table_order(spark, path, first, last):
    """The rows as Spark reads the commits' files on executors, in the order it numbers them."""
    files = delta_inserts.added_files(path, first, last)
    rows = delta_inserts.file_rows(spark, path, files, delta_inserts.table_schema(spark, path)).toPandas()
    rows = rows.sort_values(delta_inserts.ROW_IN_TABLE).drop(columns=[delta_inserts.ROW_IN_TABLE])
    return rows.reset_index(drop=True)


@pytest.mark.parametrize("order_by", [(), ("seq",)])
def test_plain_appends_read_from_files_match_the_change_feed(spark, appends, order_by):
    files = delta_inserts.added_files(appends, 0, 3)
    assert [version for version, _ in files] == [1, 1, 2, 2, 3, 3]  # two files a commit
    assert delta_inserts._from_files(appends, files, SCHEMA, "UTC") is not None   # the direct path
    direct = delta_inserts.inserted_rows(spark, appends, 0, 3, order_by)
    expected = via_change_feed(spark, appends, 0, 3, order_by)
    assert len(direct) == 120
    keys = [delta_inserts.VERSION, *(order_by or SCHEMA.names)]
    pd.testing.assert_frame_equal(  # the same rows and dtypes
        direct.sort_values(keys, kind="stable", na_position="first").reset_index(drop=True), expected)
    if order_by:
        pd.testing.assert_frame_equal(direct, expected)
        for _, version in direct.groupby(delta_inserts.VERSION):
            assert version["seq"].is_monotonic_increasing
    else:  # the table's order: each commit wrote its rows in descending seq
        pd.testing.assert_frame_equal(direct, in_table_order(spark, appends, 0, 3))
        for _, version in direct.groupby(delta_inserts.VERSION):
            assert version["seq"].is_monotonic_decreasing
    assert direct[delta_inserts.VERSION].is_monotonic_increasing


def test_a_plan_made_before_rows_kept_the_tables_order_sorts_them_as_it_did(spark, appends):
    sorted_rows = delta_inserts.inserted_rows(spark, appends, 1, 3, sort_all=True)
    pd.testing.assert_frame_equal(sorted_rows, via_change_feed(spark, appends, 1, 3))


def test_timestamps_follow_the_session_time_zone(spark, appends):
    utc = delta_inserts.inserted_rows(spark, appends, 1, 1, ("seq",))
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        local = delta_inserts.inserted_rows(spark, appends, 1, 1, ("seq",))
        expected = via_change_feed(spark, appends, 1, 1, ("seq",))
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    pd.testing.assert_frame_equal(local, expected)
    assert (utc["ts"] - local["ts"]).dropna().eq(pd.Timedelta(hours=5)).all()


def test_updates_and_deletes_insert_nothing_and_merges_that_update_come_from_the_change_feed(
        spark, appends):
    table = DeltaTable.forPath(spark, appends)
    table.update("seq = 101", {"s": "'changed'"})                        # version 4
    table.delete("seq = 102")                                            # version 5
    source = spark.createDataFrame([(1000, 999), (103, 7)], "seq long, k long")
    (table.alias("t").merge(source.alias("u"), "t.seq = u.seq").whenMatchedUpdate(set={"k": "u.k"})
     .whenNotMatchedInsert(values={"seq": "u.seq", "k": "u.k"}).execute())  # version 6
    for version in (4, 5):  # from the log alone: whatever they rewrite, they insert nothing
        assert delta_inserts.added_files(appends, version, version) == []
    assert delta_inserts.added_files(appends, 6, 6) is None                  # which rows are new?
    rows = delta_inserts.inserted_rows(spark, appends, 4, 6, ("seq",))
    assert rows[[delta_inserts.VERSION, "seq", "k"]].values.tolist() == [[6, 1000, 999]]
    nothing = delta_inserts.inserted_rows(spark, appends, 4, 5)
    pd.testing.assert_frame_equal(nothing, via_change_feed(spark, appends, 4, 5))  # same dtypes


def test_readings_say_which_read_can_give_each_commit(spark, tmp_path):
    path = str(tmp_path / "events")
    rows = spark.createDataFrame([(1, 1), (2, 2)], "k long, x long")
    rows.write.format("delta").save(path)                                # 0: an append, no feed
    table = DeltaTable.forPath(spark, path)
    table.update("k = 1", {"x": "10"})                                   # 1: inserts nothing

    def merge(*upserts):
        upsert = spark.createDataFrame(list(upserts), "k long, x long")
        (table.alias("t").merge(upsert.alias("u"), "t.k = u.k").whenMatchedUpdateAll()
         .whenNotMatchedInsertAll().execute())

    merge((2, 20), (3, 3))                                               # 2: no read can give it
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true, "
              "delta.checkpointInterval = 2)")                           # 3
    merge((2, 21), (4, 4))                                               # 4: the feed holds it
    rows.write.format("delta").mode("append").save(path)                 # 5
    commits = delta_inserts.readings(path, 0, 5)
    assert [(c.operation, c.from_files, c.from_feed) for c in commits] == [
        ("WRITE", True, False), ("UPDATE", True, False), ("MERGE", False, False),
        ("SET TBLPROPERTIES", True, True), ("MERGE", False, True), ("WRITE", True, True)]
    assert delta_inserts.readable_runs(commits) == ([1], commits[2])
    assert delta_inserts.readable_runs(commits[3:]) == ([5], None)         # all through the feed
    merge((2, 22))                                                       # 6: inserts nothing
    assert [(c.from_files, c.from_feed) for c in delta_inserts.readings(path, 6, 6)] == [(True, True)]
    assert delta_inserts.feed_on(path) is True
    for version in range(4):  # the JSON commits log retention removes once a checkpoint covers them
        os.remove(os.path.join(path, "_delta_log", f"{version:020d}.json"))
    assert [c.from_feed for c in delta_inserts.readings(path, 5, 6)] == [True, True]  # checkpoint 4
    assert delta_inserts.readings(path, 4, 5) is None                         # version 3's is gone


def test_a_column_added_reads_null_from_older_files_partitions_take_the_feed_and_spark_reads_other_types(
        spark, tmp_path, appends):
    wider = spark.createDataFrame([(1, 2)], "seq long, extra long")
    wider.write.format("delta").mode("append").option("mergeSchema", "true").save(appends)
    table = spark.read.format("delta").load(appends)
    table.where("seq = 101").write.format("delta").mode("append").save(appends)   # every column
    files = delta_inserts.added_files(appends, 3, 5)
    assert delta_inserts._from_files(appends, files, table.schema, "UTC") is not None  # extra: null
    rows = delta_inserts.inserted_rows(spark, appends, 3, 5)
    assert len(rows) == 42 and rows["extra"].isna().sum() == 41
    pd.testing.assert_frame_equal(rows, in_table_order(spark, appends, 3, 5))

    parted = str(tmp_path / "parted")
    spark.createDataFrame([(1, "a")], "k long, p string").write.format("delta").partitionBy("p") \
        .options(**CDF).save(parted)
    assert delta_inserts.added_files(parted, 0, 0) is None                  # the file lacks p
    assert delta_inserts.inserted_rows(spark, parted, 0, 0)[["k", "p"]].values.tolist() == [[1, "a"]]

    money = str(tmp_path / "money")
    spark.createDataFrame([(decimal.Decimal("1.50"),), (decimal.Decimal("0.50"),)],
                          "amount decimal(10,2)").coalesce(1).write.format("delta").save(money)
    schema = spark.read.format("delta").load(money).schema
    files = delta_inserts.added_files(money, 0, 0)
    assert delta_inserts._from_files(money, files, schema, "UTC") is None     # not a plain type: Spark
    assert delta_inserts.inserted_rows(spark, money, 0, 0)["amount"].tolist() == [
        decimal.Decimal("1.50"), decimal.Decimal("0.50")]              # the file's order, no feed


def test_compaction_adds_no_rows(spark, appends):
    DeltaTable.forPath(spark, appends).optimize().executeCompaction()    # version 4
    assert delta_inserts.added_files(appends, 4, 4) == []                     # nothing to read
    assert delta_inserts.inserted_rows(spark, appends, 4, 4).empty
    assert len(delta_inserts.inserted_rows(spark, appends, 1, 4)) == 120


def test_rows_already_in_order_are_not_sorted_again_and_match_the_change_feed(spark, tmp_path):
    path = str(tmp_path / "ordered")
    tables.ensure(spark, path, SCHEMA, properties=CDF)
    for version in range(1, 3):
        day = datetime.date(2026, 1, 1)
        rows = [(k % 3, k, k / 4, f"s{k}", True, datetime.datetime(2026, 1, 1), day, k)
                for k in range(100 * version, 100 * version + 30)]   # in seq order already
        frame = spark.createDataFrame(rows, SCHEMA).coalesce(1)
        frame.write.format("delta").mode("append").save(path)
    direct = delta_inserts.inserted_rows(spark, path, 1, 2, ("seq",))
    pd.testing.assert_frame_equal(direct, via_change_feed(spark, path, 1, 2, ("seq",)))


@pytest.mark.parametrize("columns, in_order", [
    ({"v": [1, 1, 2, 2], "s": [1, 2, 0, 5]}, True),             # ties on v, s sorted within
    ({"v": [1, 1, 2, 2], "s": [2, 1, 0, 5]}, False),            # s out of order within a tie
    ({"v": [1, 2, 3, 4], "s": [9, 8, 7, 6]}, True),             # v alone decides
    ({"v": [1, 1, 1, 1], "s": [1.0, None, 2.0, 3.0]}, False),   # a null: left to the sort
    ({"v": [1, 1, 1, 1], "s": ["a", "b", "c", "d"]}, False),    # strings are not checked
    ({"v": [2, 1, 3, 4], "s": [1, 2, 3, 4]}, False),
])
def test_in_order_is_true_only_when_a_stable_sort_would_move_nothing(columns, in_order):
    frame = pd.DataFrame(columns)
    assert delta_inserts._in_order(frame, ["v", "s"]) is in_order
    if in_order:
        pd.testing.assert_frame_equal(frame.sort_values(["v", "s"], kind="stable"), frame)
