"""Continuous mode: one long-lived run that picks up input as it arrives and stops cleanly."""

import queue
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

import ops as sp
from state import CheckpointLog
from state.lake import tables
from tests.ops.runtime import continuous_child as child


def _in_thread(pipeline, spark, warehouse, **kwargs):
    """Run ``pipeline`` continuously in a thread; returns (thread, stop, outcome dict)."""
    stop, outcome = sp.StopSignal(), {}

    def run():
        try:
            outcome["report"] = pipeline.run_continuously(spark, warehouse, stop=stop,
                                                          max_seconds=120, **kwargs)
        except BaseException as error:  # the test thread reports it
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, stop, outcome


def _until(condition, seconds=60.0, what="condition"):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_runs_each_new_publish_then_stops_after_a_checkpoint(spark, warehouse):
    pipeline = child.build()
    checkpoints, batches = [], []
    thread, stop, outcome = _in_thread(pipeline, spark, warehouse, trigger="100ms",
                                       checkpointed=checkpoints.append, progress=batches.append)
    for n in range(3):  # each publish arrives while the run waits: one batch each
        pipeline.publish(spark, [{"k": 1, "x": n + 1}, {"k": 2, "x": 10}], warehouse)
        _until(lambda n=n: checkpoints and checkpoints[-1].batch_id == n + 1, what=f"batch {n + 1}")
    stop.set("test done")
    thread.join(60)

    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    report = outcome["report"]
    assert (report.totals.batches, report.rows_in, report.last_batch_id) == (3, 6, 3)
    assert report.batches == []  # a continuous run forgets batches once checkpointed
    assert [c.batch_id for c in checkpoints] == [1, 2, 3]
    assert [len(c.batches) for c in checkpoints] == [1, 1, 1] and len(batches) == 3
    sink = pipeline.read_sink(spark, "out", warehouse)
    assert sink.sort_values(["_batch_id", "_row"])["total"].tolist() == [1, 10, 3, 20, 6, 30]
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 3


def _fire_after_a_second(op, md, data):
    if md.timer is not None:  # no rows: the key's timer fell due while the run was idle
        return pd.DataFrame({"k": [md.key], "fired": [True]})
    sp.set_timer(op, md, after="1s")
    return None


def test_an_idle_run_fires_timers_as_they_fall_due(spark, warehouse):
    pipeline = (sp.read.from_callback("events", key="k", schema=child.SCHEMA)
                .map(_fire_after_a_second, state=0, timers=True)
                .write.to_delta("fired")).named("timed_live")
    thread, stop, outcome = _in_thread(pipeline, spark, warehouse, trigger="100ms")
    pipeline.publish(spark, [{"k": 4, "x": 1}], warehouse)
    _until(lambda: tables.exists(spark, pipeline.layout(warehouse).table("fired")),
           what="the timer to fire")
    stop.set("test done")
    thread.join(60)
    assert "error" not in outcome, outcome.get("error")
    assert pipeline.read_sink(spark, "fired", warehouse)[["k", "fired"]].values.tolist() == [[4, True]]
    assert outcome["report"].totals.batches == 2  # the record's batch, then one with no input


def test_time_limit_and_bad_trigger(spark, warehouse):
    pipeline = child.build()
    with pytest.raises(sp.ConfigError, match=r"trigger='soon' is not a duration"):
        pipeline.run_continuously(spark, warehouse, trigger="soon")
    started = time.monotonic()
    report = pipeline.run_continuously(spark, warehouse, trigger="50ms", max_seconds=1)
    assert report.totals.batches == 0 and time.monotonic() - started < 30


def _lines(process):
    """The child's stdout lines, as they come, in a queue."""
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in process.stdout:
            lines.put(line.rstrip())
    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines, prefix, seen, seconds=120.0):
    deadline = time.monotonic() + seconds
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no {prefix!r} line; saw {seen[-20:]}") from None
        seen.append(line)
        if line.startswith(prefix):
            return line


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGTERM])
def test_a_signal_mid_batch_finishes_the_batch_and_its_checkpoint(spark, warehouse, child_env,
                                                                   signal_number):
    pipeline = child.build()
    process = subprocess.Popen([sys.executable, "-m", "tests.ops.runtime.continuous_child"],
                               env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    seen: list[str] = []
    try:
        lines = _lines(process)
        _wait_for(lines, "READY", seen)
        pipeline.publish(spark, [{"k": 1, "x": 5}], warehouse)
        _wait_for(lines, "CHECKPOINT", seen)
        pipeline.publish(spark, [{"k": 1, "x": child.SLOW}, {"k": 1, "x": 7}], warehouse)
        _wait_for(lines, "SLOW BATCH 2", seen)
        process.send_signal(signal_number)  # while batch 2 sleeps in its operator
        last = _wait_for(lines, "STOPPED", seen)
        assert process.wait(60) == 0, process.stderr.read()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    assert f"received {signal.Signals(signal_number).name}" in last
    assert "batch=2 rows=3" in last
    assert any(line.startswith("CHECKPOINT") and "batch=2" in line for line in seen)
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 2
    sink = pipeline.read_sink(spark, "out", warehouse)
    assert sink["total"].tolist() == [5, 4, 11]  # batch 2 written once, after 5 + (-1) + 7
