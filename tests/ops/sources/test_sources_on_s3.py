"""The landing-folder and Delta sources with the warehouse on S3: each file and each commit read
once, in arrival order."""

import boto3

import ops as sp
from tests.ops.runtime.recovery import crash_pipeline as cp


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
