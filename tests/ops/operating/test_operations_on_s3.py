"""The operations, SQL state tables and the landing-folder source with the warehouse on S3."""

import boto3
import pytest

import ops as sp
from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome, publish_all


@pytest.mark.slow
def test_compact_reset_replay_and_vacuum_on_s3_leave_what_a_plain_run_leaves(
        spark, s3_warehouse, plain_oracle):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    pipeline.run_once(spark, s3_warehouse)
    assert outcome(spark, pipeline, s3_warehouse) == plain_oracle

    kept = sp.compact(spark, pipeline, s3_warehouse)
    assert kept == 4 + 6  # one row per key, and every checkpoint's record
    sp.replay(spark, pipeline, 3, s3_warehouse)  # batches 4-6 again, in a new epoch
    again = outcome(spark, pipeline, s3_warehouse)
    assert again["sink"] == plain_oracle["sink"] and again["state"] == plain_oracle["state"]
    assert again["batch"] == 6
    sp.vacuum(spark, pipeline, 0, s3_warehouse)  # the files replaced by compaction and the reset
    assert outcome(spark, pipeline, s3_warehouse) == again


def test_a_sql_state_table_and_its_changelog_on_s3(spark, s3_warehouse):
    sales = sp.read.from_callback("sales", schema={"title": "string", "amount": "double"})
    tickets = sp.sql("CREATE TABLE tickets AS SELECT title, COUNT(*) AS sold, SUM(amount) AS revenue "
                     "FROM sales GROUP BY title EMIT CHANGES", streams={"sales": sales})
    tickets.publish(spark, [{"title": "Heat", "amount": 5.0}, {"title": "Aliens", "amount": 7.0}],
                    s3_warehouse)
    tickets.run_once(spark, s3_warehouse)
    tickets.publish(spark, [{"title": "Heat", "amount": 6.0}], s3_warehouse)
    tickets.run_once(spark, s3_warehouse)

    table = tickets.read_sink(spark, "tickets", s3_warehouse).sort_values("title")
    assert table[["title", "sold", "revenue"]].values.tolist() == [["Aliens", 1, 7.0], ["Heat", 2, 11.0]]
    changelog = spark.read.format("delta").load(f"{tickets.layout(s3_warehouse).root}/tickets_changelog")
    heat = changelog.where("title = 'Heat'").orderBy("_batch_id").toPandas()
    assert heat["sold"].tolist() == [1, 2]  # each batch's change, in order


def test_files_landed_in_s3_are_read_once_in_arrival_order(spark, s3, s3_warehouse):
    landing = f"{s3_warehouse}/landing"
    bucket, prefix = landing.removeprefix("s3a://").split("/", 1)
    client = boto3.client("s3", endpoint_url=s3.endpoint)
    pipeline = (sp.read.from_files(landing, "json", key="k", schema={"k": "string", "x": "long"})
                .map(cp.running_sum_plain, state=0, name="running_sum").write.to_delta("sums")
                ).named("s3_files")
    client.put_object(Bucket=bucket, Key=f"{prefix}/a.json", Body=b'{"k":"a","x":1}\n{"k":"b","x":2}\n')
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 2
    client.put_object(Bucket=bucket, Key=f"{prefix}/b.json", Body=b'{"k":"a","x":10}\n')
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 1
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 0
    sums = pipeline.read_sink(spark, "sums", s3_warehouse)
    assert sums[["k", "total"]].values.tolist() == [["a", 1], ["b", 2], ["a", 11]]


def test_a_delta_source_on_s3_reads_each_commit_once(spark, s3_warehouse):
    source = f"{s3_warehouse}/events"
    writer = spark.createDataFrame([("a", 1), ("b", 2)], "k STRING, x LONG").write.format("delta")
    writer.option("delta.enableChangeDataFeed", "true").save(source)
    pipeline = (sp.read.from_delta(source, key="k", order_by=("x",))
                .map(cp.running_sum_plain, state=0, name="running_sum").write.to_delta("sums")
                ).named("s3_delta_source")
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 2
    spark.createDataFrame([("a", 10)], "k STRING, x LONG").write.format("delta").mode("append").save(source)
    assert pipeline.run_once(spark, s3_warehouse).rows_in == 1
    sums = pipeline.read_sink(spark, "sums", s3_warehouse)
    assert sums[["k", "total"]].values.tolist() == [["a", 1], ["b", 2], ["a", 11]]
