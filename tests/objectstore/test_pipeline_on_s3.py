"""A pipeline whose warehouse is on S3 (the session's local S3 server): state, sinks,
checkpoints and recovery hold there as on a local disk."""

import time

import ops as sp
from state import CheckpointLog
from tests.ops.runtime.recovery import crash_pipeline as cp


def test_running_sum_on_s3_continues_its_state_across_runs(spark, s3_warehouse):
    pipeline = cp.build_plain("on_s3")
    started = time.monotonic()
    for rows in cp.INPUT[:3]:
        pipeline.publish(spark, rows, s3_warehouse)
    first = pipeline.run_once(spark, s3_warehouse)
    for rows in cp.INPUT[3:]:
        pipeline.publish(spark, rows, s3_warehouse)
    second = pipeline.run_once(spark, s3_warehouse)
    print(f"6 publishes and two runs on S3: {time.monotonic() - started:.1f} s")

    assert (first.last_batch_id, second.last_batch_id) == (3, 6)
    state = sp.read_state(spark, pipeline, "running_sum", warehouse=s3_warehouse)
    expected = {k: sum(r["x"] for batch in cp.INPUT for r in batch if r["k"] == k) for k in (0, 1, 2, 7)}
    assert dict(zip(state["key"].astype(int), state["value"])) == expected
    sink = pipeline.read_sink(spark, "out", s3_warehouse)
    assert len(sink) == sum(len(batch) for batch in cp.INPUT)
    assert CheckpointLog(spark, pipeline.layout(s3_warehouse)).latest().batch_id == 6


def test_the_query_manager_follows_a_state_table_on_s3_without_spark(spark, s3_warehouse):
    from analytics import QueryManager
    from analytics.demo import cpu_pipeline, register_cpu_analytic

    register_cpu_analytic()
    pipeline = cpu_pipeline()
    manager = QueryManager(spark, {"servers": (pipeline, "cpu_now")}, s3_warehouse)
    pipeline.publish(spark, [{"sym": "s1", "cpu": 10.0}, {"sym": "s2", "cpu": 20.0}], s3_warehouse)
    pipeline.run_once(spark, s3_warehouse)
    manager.publish_new()
    handle = manager.subscribe("cpu_by_server", {"syms": ["s1"]}, "servers", "ann")
    assert [(r["sym"], r["cpu"]) for r in handle.rows] == [("s1", 10.0)] and handle.batch_id == 1

    pipeline.publish(spark, [{"sym": "s1", "cpu": 11.0}, {"sym": "s2", "cpu": 5.0}], s3_warehouse)
    pipeline.run_once(spark, s3_warehouse)
    pushed = manager.publish_new()[handle.subscription.id]

    assert [(batch, [(r["sym"], r["cpu"]) for r in rows]) for batch, rows in pushed] == \
        [(2, [("s1", 11.0)])]
    live = manager._live["servers"]
    assert not live._with_spark  # followed through delta-rs, commit by commit
    manager.close()
