"""The example job through Dagster with its warehouse on S3, and what sensors read there
without a JVM."""

import dagster as dg

from assets import SparkResource, WarehouseResource
from dagster_project import defs
from dagster_project.pipelines import running_sum_keyed, running_sum_unkeyed
from state import checkpointed_offsets, wake_time
from tests.helpers import sink_column, spark_jobs


def test_running_sum_job_on_s3_writes_the_example_sums_with_no_spark_job_and_sensors_probe_without_spark(
        spark, s3_warehouse):
    job = defs.resolve_job_def("running_sum_job")
    resources = {"spark": SparkResource(master="local[2]"),
                 "warehouse": WarehouseResource(path=s3_warehouse)}
    jobs = spark_jobs(spark)
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, resources=resources)
    assert result.success
    assert spark_jobs(spark) == jobs  # publish, batches, metadata and checks: all by delta-rs
    assert all(check.passed for check in result.get_asset_check_evaluations())
    sums = {m.asset_key.to_user_string(): m.metadata
            for m in result.asset_materializations_for_node("running_sum")}["running_sum/sums"]
    assert sums["dagster/row_count"].value == 7 and len(sums["preview"].records) == 7
    assert sink_column(spark, running_sum_keyed, s3_warehouse, "total") == [1, 3, 6, 1, 3, 6, 10]
    assert sink_column(spark, running_sum_unkeyed, s3_warehouse, "total") == [1, 3, 6, 7, 9, 12, 16]

    # a sensor's reads: delta-rs, no Spark session handed in
    layout = running_sum_keyed.layout(s3_warehouse)
    assert running_sum_keyed.source.probe(layout) == "1"  # the inbox's one publish
    assert checkpointed_offsets(layout) == {running_sum_keyed.source.name: 1}
    assert wake_time(layout) is None
