"""Blind appends by delta-rs (state.delta_io.appends) on S3: concurrent writers, idempotence,
and tables that Spark and delta-rs both write, read, merge and vacuum."""

import pandas as pd
from delta.tables import DeltaTable as SparkDeltaTable

from ops.sources import delta_inserts
from state import delta_io
from state.lake import direct, tables
from state.lake.direct import NewTable, Outcome
from tests.state.delta_io.racing import WRITER, finished, racing, started


def test_two_processes_appending_to_one_s3_table_lose_nothing(s3_warehouse):
    path = f"{s3_warehouse}/shared"
    racing(WRITER, path, ("a", "b"), 12)

    rows = delta_io.table(path).to_pandas()
    assert sorted(zip(rows["writer"], rows["i"])) == [(w, i) for w in "ab" for i in range(12)]
    assert delta_io.latest_version(path) == 23  # one commit per append: none overwritten
    assert sorted(delta_io.recent_metadata(path, 24)) == sorted(f"{w}-{i}" for w in "ab" for i in range(12))


def test_an_append_seen_before_is_skipped_and_a_new_one_commits(s3_warehouse):
    path = f"{s3_warehouse}/idempotent"
    rows = pd.DataFrame({"k": [1, 2]})
    assert direct.append(rows, path, txn=("app", 5), create=NewTable()) is Outcome.COMMITTED
    assert direct.append(rows, path, txn=("app", 5)) is Outcome.SKIPPED
    assert direct.append(rows, path, txn=("app", 4)) is Outcome.SKIPPED
    assert direct.append(rows, path, txn=("app", 6)) is Outcome.COMMITTED
    assert len(delta_io.table(path).to_pandas()) == 4


def test_a_spark_writer_racing_a_delta_rs_writer_on_one_s3_table_loses_nothing(spark, s3_warehouse):
    path = f"{s3_warehouse}/raced_table"
    spark.createDataFrame([("seed", 0)], "writer STRING, i LONG").write.format("delta").save(path)
    rival = started(WRITER, path, "delta-rs", 15)
    for i in range(15):
        (spark.createDataFrame([("spark", i)], "writer STRING, i LONG").write.format("delta")
         .mode("append").save(path))
    finished(rival)

    rows = spark.read.format("delta").load(path).toPandas()
    assert sorted(zip(rows["writer"], rows["i"])) == sorted(
        [("seed", 0)] + [(w, i) for w in ("delta-rs", "spark") for i in range(15)])
    assert delta_io.latest_version(path) == 30  # every commit its own version: none overwritten


def test_a_table_spark_made_with_the_feed_is_appended_by_delta_rs_then_merged_by_spark(
        spark, s3_warehouse):
    path = f"{s3_warehouse}/from_spark"
    (spark.createDataFrame([(1, "a")], "id LONG, v STRING").write.format("delta")
     .option("delta.enableChangeDataFeed", "true").save(path))
    assert direct.append(pd.DataFrame({"id": [2, 3], "v": ["b", "c"]}), path,
                         txn=("rs", 1)) is Outcome.COMMITTED

    # delta-rs reads what it appended through the feed, as Spark does
    inserted = delta_inserts.inserted_rows(spark, path, 1, 1, order_by=("id",))
    assert inserted[["_commit_version", "id", "v"]].values.tolist() == [[1, 2, "b"], [1, 3, "c"]]
    target = SparkDeltaTable.forPath(spark, path)
    (target.alias("t").merge(spark.createDataFrame([(2, "B")], "id LONG, v STRING").alias("s"),
                             "t.id = s.id").whenMatchedUpdateAll().execute())
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    target.vacuum(0)
    got = spark.read.format("delta").load(path).orderBy("id").toPandas()
    assert got.values.tolist() == [[1, "a"], [2, "B"], [3, "c"]]
    assert delta_io.table(path).transaction_version("rs") == 1  # Spark kept delta-rs's txn


def test_a_table_delta_rs_made_is_appended_merged_and_vacuumed_by_spark_then_by_delta_rs_again(
        spark, s3_warehouse):
    path = f"{s3_warehouse}/from_rs"
    feed = (("delta.enableChangeDataFeed", "true"),)
    schema = ({"name": "id", "type": "long", "nullable": True, "metadata": {}},
              {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}})
    rows = pd.DataFrame({"id": [1], "at": pd.to_datetime(["2026-11-26 10:00"], utc=True)})
    assert direct.append(rows, path, create=NewTable(properties=feed, fields=schema)) is Outcome.COMMITTED
    tables.append(spark.createDataFrame([(2,)], "id LONG").selectExpr(
        "id", "TIMESTAMP'2026-11-26 11:00:00' AS at"), path, txn=("spark", 1))
    SparkDeltaTable.forPath(spark, path).delete("id = 1")
    assert direct.append(pd.DataFrame({"id": [3], "at": pd.to_datetime(["2026-11-26 12:00"], utc=True)}),
                         path, txn=("rs", 1)) is Outcome.COMMITTED

    assert sorted(delta_io.table(path).to_pandas()["id"]) == [2, 3]
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [2, 3]
    assert tables.latest_version(path) == 3 and tables.columns(path) == ("id", "at")
    changes = spark.read.format("delta").option("readChangeFeed", "true").option(
        "startingVersion", 0).load(path).where("_change_type = 'delete'").collect()
    assert [row.id for row in changes] == [1]  # Spark's delete wrote its change file
