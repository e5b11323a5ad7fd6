"""Dagster over a Kafka source: the sensor asks for a run when a partition's read-committed end
passed the last checkpoint's offset, and the asset reports the lag per partition."""

import dagster as dg

import ops as sp
from assets import PIPELINE_TAG, SparkResource, WarehouseResource, make_pipeline_asset, make_pipeline_sensor
from ops.kafka_client import create_topic, send_json
from tests.assets.sensing import placeholder_job, tick


def test_sensor_on_offsets_and_lag_per_partition_in_the_asset(spark, warehouse, kafka, topic):
    create_topic(kafka.bootstrap, topic, partitions=2)
    pipeline = (sp.read.from_kafka(topic, bootstrap=kafka.bootstrap, schema={"x": "long"}, key=None,
                                   max_records=2)
                .write.to_delta("copy")).named("kafka_sensed")
    sensor = make_pipeline_sensor(pipeline, placeholder_job)
    asset = make_pipeline_asset(pipeline)
    resources = {"spark": SparkResource(master="local[2]", shuffle_partitions=2),
                 "warehouse": WarehouseResource(path=warehouse)}
    with dg.instance_for_test() as instance:
        assert "no input yet" in tick(sensor, instance, None, warehouse).skip_message
        send_json(kafka.bootstrap, topic, [{"x": 1}, {"x": 2}, {"x": 3}], partition=0)
        first = tick(sensor, instance, None, warehouse)
        assert [r.run_key for r in first.run_requests] == [f"kafka_sensed:{topic}:0=3,{topic}:1=0"]

        run = dg.materialize([asset], instance=instance, resources=resources,
                             run_config={"ops": {"kafka_sensed": {"config": {"max_batches": 1}}}})
        metadata = run.asset_materializations_for_node("kafka_sensed")[0].metadata
        assert metadata["source_lag"].value == 1
        assert metadata["source_lag_by_partition"].value == {f"{topic}:0": 1, f"{topic}:1": 0}
        assert "there is more" not in str(metadata)

        behind = tick(sensor, instance, first.cursor, warehouse)  # offset 2 not read yet
        assert [r.tags["lakestream/unread"] for r in behind.run_requests] == [f"{topic}:0+1"]
        pipeline.run_once(spark, warehouse)
        caught_up = tick(sensor, instance, behind.cursor, warehouse)
        assert not caught_up.run_requests and "no new input" in caught_up.skip_message

        send_json(kafka.bootstrap, topic, [{"x": 4}], partition=1)
        again = tick(sensor, instance, caught_up.cursor, warehouse)
        assert [r.tags["lakestream/unread"] for r in again.run_requests] == [f"{topic}:1+1"]
        assert again.run_requests[0].tags[PIPELINE_TAG] == "kafka_sensed"
    assert sp.describe_lag_by_part(spark, pipeline, warehouse) == {f"{topic}:0": 0, f"{topic}:1": 1}
    status = sp.describe(spark, pipeline, warehouse)
    assert status.source_lag == 1
    assert f"  source lag by partition {{'{topic}:0': 0, '{topic}:1': 1}}" in status.lines()
