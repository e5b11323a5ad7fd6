"""Timers through the runtime: a batch with no input fires them, in both execution paths, a
restart carries them, the checkpoint says when the next falls due, and a process killed between
a timer firing and the checkpoint leaves its output once (tests/ops/runtime/recovery/timer_child.py)."""

import signal

import pandas as pd
import pytest

import ops as sp
from ops.testing import ManualClock
from state import CheckpointLog, wake_time

from . import timer_child as tc


def _publish(spark, pipeline, warehouse, batches=tc.INPUT):
    for rows in batches:
        pipeline.publish(spark, rows, warehouse)


def _fired(spark, pipeline, warehouse):
    sink = pipeline.read_sink(spark, "out", warehouse)
    return sorted(zip(sink["k"], sink["total"]))


def _no_timers_left(spark, pipeline, warehouse):
    timers = sp.read_state(spark, pipeline, "quiet__timers", warehouse=warehouse)
    return timers.empty


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_a_run_with_no_new_input_fires_due_timers_in_a_batch_of_its_own(spark, warehouse, mode):
    pipeline = tc.build(mode)
    _publish(spark, pipeline, warehouse)
    first = pipeline.run_once(spark, warehouse, max_batches=2)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")  # distributed: rescaled, 2 tasks to 3
    try:
        second = pipeline.run_once(spark, warehouse)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)

    assert [b.rows_in for b in first.batches + second.batches] == [3, 3, 0]  # last: timers
    assert _fired(spark, pipeline, warehouse) == sorted(tc.expected_totals().items())
    assert _no_timers_left(spark, pipeline, warehouse)
    layout = pipeline.layout(warehouse)
    assert wake_time(layout) is None and CheckpointLog(spark, layout).latest().wake_at is None
    assert pipeline.run_once(spark, warehouse).batches == []  # nothing due: no batch


@pytest.mark.parametrize("store", ["local", "s3"])
def test_the_checkpoint_says_when_the_next_processing_time_timer_is_due(spark, request, store):
    warehouse = request.getfixturevalue("warehouse" if store == "local" else "s3_warehouse")

    def remind(op, md, data):
        if md.timer is not None:
            return pd.DataFrame({"k": [md.key], "fired": [md.timer], "batch": [md.batch_id]})
        sp.set_timer(op, md, at=md.batch_time + 60_000 * md.key)  # k minutes from now
        return None

    pipeline = (sp.read.from_callback("events", key="k", schema=tc.SCHEMA)
                .map(remind, state=0, name="quiet", timers=True).write.to_delta("out")
                .named("reminders"))
    pipeline.publish(spark, [{"k": 1, "x": 0}, {"k": 2, "x": 0}], warehouse)
    first = pipeline.run_once(spark, warehouse)
    planned = CheckpointLog(spark, pipeline.layout(warehouse)).latest()
    assert planned.wake_at == wake_time(pipeline.layout(warehouse))  # read without Spark (delta-rs on S3)
    timers = sp.read_state(spark, pipeline, "quiet__timers", warehouse=warehouse)
    due = planned.wake_at - 1  # wake_at: the first ms after the deadline, when it fires
    assert dict(zip(timers["key"], timers["value"])) == {1: due, 2: due + 60_000}
    assert len(first.batches) == 1 and pipeline.run_once(spark, warehouse).batches == []


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_event_time_timers_and_the_watermark_survive_a_restart(spark, warehouse, mode):
    def session_end(op, md, data):  # a key's session ends 5 s of event time after its last row
        if md.timer is not None:
            return pd.DataFrame({"k": [md.key], "ended": [md.timer], "batch": [md.batch_id]})
        sp.set_timer(op, md, at=data["ts"].max() + pd.Timedelta("5s"))
        return None

    def build():
        return (sp.read.from_callback("events", key="k", schema={"k": "long", "ts": "timestamp"})
                .map(session_end, state=0, name="quiet", timers=True, event_time="ts")
                .write.to_delta("out").named("sessions").with_mode(mode))

    def at(seconds):
        return pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(seconds=seconds)

    pipeline = build()
    pipeline.publish(spark, [{"k": 1, "ts": at(10)}, {"k": 2, "ts": at(20)}], warehouse)
    pipeline.run_once(spark, warehouse)  # watermark 20 s: k=1's session (15 s) ended
    build().publish(spark, [{"k": 3, "ts": at(40)}], warehouse)
    second = build().run_once(spark, warehouse)  # a new run: watermark and timers from _state

    ended = pipeline.read_sink(spark, "out", warehouse)
    assert list(zip(ended["k"], ended["ended"] // 1000, ended["batch"])) == [
        (1, at(15).value // 10**6 // 1000, 2), (2, at(25).value // 10**6 // 1000, 4)]
    assert [b.rows_in for b in second.batches] == [1, 0]
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().wake_at is None  # k=3: 45 s


# The steps between the batch that fires the timers (the third: two batches of input, then
# the batch with no input) writing its output and its checkpoint committing: where a timer
# could fire twice. (The protocol's other steps are crash-tested in test_crash_recovery.py.)
CRASH_STEPS = [("driver", "after_sink_write:3"), ("driver", "before_checkpoint_commit:3"),
               ("distributed", "before_checkpoint_commit:3")]


@pytest.mark.slow
@pytest.mark.parametrize("mode,crash_at", CRASH_STEPS)
def test_a_timer_fires_once_when_the_process_dies_between_firing_and_checkpoint(
        spark, warehouse, child_env, warm_children, mode, crash_at):
    pipeline = tc.build(mode)
    _publish(spark, pipeline, warehouse)
    crashed = warm_children.run(tc.__name__, dict(child_env, TIMER_TEST_MODE=mode,
                                                  LAKESTREAM_CRASH_AT=crash_at),
                                spark=mode == "distributed")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    pipeline.run_once(spark, warehouse)  # recovery, here in-process

    assert _fired(spark, pipeline, warehouse) == sorted(tc.expected_totals().items())
    assert _no_timers_left(spark, pipeline, warehouse)
    state = sp.read_state(spark, pipeline, "quiet", warehouse=warehouse)
    assert dict(zip(state["key"], state["value"])) == tc.expected_totals()


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_ttl_deletes_expired_keys_with_tombstones_in_state(spark, warehouse, mode):
    def count(op, md, data):
        return data.assign(seen=sp.set(op, md, sp.get(op, md) + len(data)))

    pipeline = (sp.read.from_callback("events", key="k", schema=tc.SCHEMA)
                .map(count, state=0, name="quiet", ttl="1ms").write.to_delta("out")
                .named(f"ttl_{mode}").with_mode(mode))
    pipeline.publish(spark, [{"k": 1, "x": 0}, {"k": 2, "x": 0}], warehouse)
    pipeline.run_once(spark, warehouse, max_batches=1)
    pipeline.publish(spark, [{"k": 1, "x": 0}, {"k": 3, "x": 0}], warehouse)
    report = pipeline.run_once(spark, warehouse)

    # batch 2 comes more than 1 ms after batch 1: keys 1 and 2 expired before it, so 1 starts
    # again from 0; then the run's batch with no input expires 1 and 3
    assert pipeline.read_sink(spark, "out", warehouse)["seen"].tolist() == [1, 1, 1, 1]
    assert [b.rows_in for b in report.batches] == [2, 0]
    assert sp.read_state(spark, pipeline, "quiet", warehouse=warehouse).empty
    rows = (spark.read.format("delta").load(pipeline.layout(warehouse).state)
            .where("operator = 'quiet' AND deleted").select("key").toPandas())
    assert sorted(rows["key"]) == ["1", "2", "3"]  # 1: expired and set again in batch 2, then expired


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_a_deadline_equal_to_the_clock_starts_no_batch_and_fires_one_ms_later(spark, warehouse, mode):
    def remind(op, md, data):
        if md.timer is not None:
            return pd.DataFrame({"k": [md.key], "fired": [md.timer]})
        sp.set_timer(op, md, after=60_000)  # a number: ms
        return None

    pipeline = (sp.read.from_callback("events", key="k", schema=tc.SCHEMA)
                .map(remind, state=0, name="quiet", timers=True).write.to_delta("out")
                .named("on_time").with_mode(mode))
    clock = ManualClock("2026-01-01T00:00:00Z")
    pipeline.publish(spark, [{"k": 1, "x": 0}], warehouse)
    assert len(pipeline.run_once(spark, warehouse, clock=clock).batches) == 1
    clock.advance(60)  # the clock is at the deadline: a batch now would fire nothing
    assert pipeline.run_once(spark, warehouse, clock=clock).batches == []
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 1
    clock.advance(1)
    assert [b.rows_in for b in pipeline.run_once(spark, warehouse, clock=clock).batches] == [0]
    assert pipeline.read_sink(spark, "out", warehouse)["fired"].tolist() == [1_767_225_660_000]


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_md_watermark_is_the_watermark_the_batch_started_with(spark, warehouse, mode):
    def stamp(op, md, data):
        return data.assign(watermark=-1 if md.watermark is None else md.watermark)  # one type

    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "long", "ts": "timestamp"},
                                      max_versions=1)
                .map(stamp, state=0, name="quiet", event_time="ts", delay="1s")
                .write.to_delta("out").named("watermarks").with_mode(mode))
    for seconds in (10, 30):
        pipeline.publish(spark, [{"k": 1, "ts": pd.Timestamp(seconds, unit="s", tz="UTC")}], warehouse)
    pipeline.run_once(spark, warehouse)

    seen = pipeline.read_sink(spark, "out", warehouse).sort_values("_batch_id")["watermark"]
    assert seen.tolist() == [-1, 9_000]  # none before the first event; then 10 s less 1 s
