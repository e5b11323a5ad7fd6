"""Sensors: new files / new Delta versions give exactly one run request each, the cursor moves
only past what was requested, and nothing is requested while a run of the pipeline is in flight."""

import os
import time

import dagster as dg
import pandas as pd
import pytest

import ops as sp
from assets import PIPELINE_TAG, make_pipeline_sensor
from tests.assets.sensing import placeholder_job, tick


def _in_flight_run(instance, pipeline_name):
    """A run of the pipeline recorded as started (as the daemon would while it executes)."""
    return instance.create_run_for_job(placeholder_job, status=dg.DagsterRunStatus.STARTED,
                                       tags={PIPELINE_TAG: pipeline_name})


def _land(directory, name, mtime):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write('{"k":"a","x":1}\n')
    os.utime(path, (mtime, mtime))


def test_file_sensor_requests_each_new_file_once(tmp_path, warehouse):
    landing = str(tmp_path / "landing")
    pipeline = (sp.read.from_files(landing, "json", key="k", schema={"k": "string", "x": "long"})
                .write.to_delta("out")).named("landed")
    sensor = make_pipeline_sensor(pipeline, placeholder_job)
    with dg.instance_for_test() as instance:
        empty = tick(sensor, instance, None, warehouse)
        assert not empty.run_requests and "no input yet" in empty.skip_message

        _land(landing, "a.json", 1_000)
        first = tick(sensor, instance, None, warehouse)
        assert [r.run_key for r in first.run_requests] == ["landed:1:1000000:a.json"]
        assert first.run_requests[0].tags[PIPELINE_TAG] == "landed"
        assert first.cursor == "1:1000000:a.json"

        again = tick(sensor, instance, first.cursor, warehouse)
        assert not again.run_requests and again.cursor == first.cursor  # cursor untouched

        _land(landing, "b.json", 2_000)
        _in_flight_run(instance, "landed")
        waiting = tick(sensor, instance, first.cursor, warehouse)
        assert not waiting.run_requests and "in flight" in waiting.skip_message
        assert waiting.cursor == first.cursor  # the new file is still owed a run


def test_delta_sensor_requests_each_new_version_once(spark, tmp_path, warehouse):
    source = str(tmp_path / "events")
    (spark.createDataFrame(pd.DataFrame({"k": [1], "x": [1]})).write.format("delta")
     .option("delta.enableChangeDataFeed", "true").save(source))
    pipeline = sp.read.from_delta(source, key="k").write.to_delta("out").named("from_delta")
    sensor = make_pipeline_sensor(pipeline, placeholder_job)
    with dg.instance_for_test() as instance:
        first = tick(sensor, instance, None, warehouse)
        assert [r.run_key for r in first.run_requests] == ["from_delta:0"]
        assert not tick(sensor, instance, first.cursor, warehouse).run_requests

        spark.createDataFrame(pd.DataFrame({"k": [2], "x": [2]})).write.format("delta") \
            .mode("append").save(source)
        second = tick(sensor, instance, first.cursor, warehouse)
        assert [r.run_key for r in second.run_requests] == ["from_delta:1"]
        assert second.cursor == "1"


def test_sensor_requests_a_run_when_a_timer_falls_due_with_no_new_input(spark, warehouse):
    def remind(op, md, data):
        if md.timer is not None:
            return pd.DataFrame({"k": [md.key], "fired": [md.timer]})
        sp.set_timer(op, md, after="3s")
        return None

    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "string"})
                .map(remind, state=0, name="remind", timers=True)
                .write.to_delta("out")).named("reminders")
    pipeline.publish(spark, [{"k": "a"}], warehouse)
    sensor = make_pipeline_sensor(pipeline, placeholder_job)
    with dg.instance_for_test() as instance:
        data = tick(sensor, instance, None, warehouse)
        assert [r.tags.get("lakestream/position") for r in data.run_requests] == ["1"]
        pipeline.run_once(spark, warehouse)  # sets a's timer: 3 s after the batch's time

        early = tick(sensor, instance, data.cursor, warehouse)
        assert not early.run_requests and "next timer due at" in early.skip_message
        deadline = sp.read_state(spark, pipeline, "remind__timers", warehouse=warehouse)["value"][0]
        time.sleep(max(0.0, deadline / 1000 - time.time()) + 0.1)
        woken = tick(sensor, instance, data.cursor, warehouse)
        # the run key names the checkpoint's wake_at: the first ms past the deadline, when it fires
        assert [r.run_key for r in woken.run_requests] == [f"reminders:1:timers@{deadline + 1}"]
        assert woken.cursor == data.cursor

        assert pipeline.run_once(spark, warehouse).batches[0].rows_in == 0  # the timer's batch
        assert pipeline.read_sink(spark, "out", warehouse)["k"].tolist() == ["a"]
        assert not tick(sensor, instance, data.cursor, warehouse).run_requests


def test_a_pipeline_sets_its_sensor_interval_which_ticks_on_the_daemons_loop():
    pipeline = (sp.read.from_callback("events", schema={"x": "long"})
                .write.to_delta("out")).named("polled")
    # the daemon's loop is 5 s: a sensor due each 5 s asks a second less, or it ticks every 10 s
    assert make_pipeline_sensor(pipeline, placeholder_job).minimum_interval_seconds == 29
    fresh = pipeline.with_poll_interval(5)
    assert make_pipeline_sensor(fresh, placeholder_job).minimum_interval_seconds == 4
    assert make_pipeline_sensor(fresh, placeholder_job,
                                minimum_interval_seconds=60).minimum_interval_seconds == 60
    for bad in (0, 2.5, "5", True):
        with pytest.raises(sp.PipelineDefinitionError, match="poll interval is a whole number"):
            pipeline.with_poll_interval(bad)
