"""Write-behind: a batch's sinks and checkpoint are written while the next batch computes,
without ever letting a checkpoint cover a batch whose output is not written."""

import dataclasses
import gc

import pytest

import ops as sp
from state import CheckpointLog
from tests.helpers import sink_rows


def _pipeline(name, fn):
    return (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"}, max_versions=1)
            .map(fn, state=0, name="total").write.to_delta("out")).named(name)


def running_total(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def test_a_failed_sink_write_stops_the_run_and_no_checkpoint_covers_its_batch(spark, warehouse):
    def typed_by_batch(op, md, data):  # batch 2's output cannot be appended to batch 1's table
        out = running_total(op, md, data)
        return out.assign(note="text") if (data["x"] == 2).any() else out.assign(note=1)

    pipeline = _pipeline("failing_sink", typed_by_batch)
    for x in (1, 2, 3):
        pipeline.publish(spark, [{"k": 1, "x": x}], warehouse)
    with pytest.raises(Exception, match="note"):
        pipeline.run_once(spark, warehouse)
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 1
    assert sink_rows(spark, pipeline, warehouse, "out")["_batch_id"].tolist() == [1]  # not 3

    def typed(op, md, data):
        return running_total(op, md, data).assign(note=1)

    fixed = dataclasses.replace(pipeline, stream=_pipeline("failing_sink", typed).stream)
    report = fixed.run_once(spark, warehouse)
    assert [b.batch_id for b in report.batches] == [2, 3]
    rows = sink_rows(spark, pipeline, warehouse, "out")
    assert rows["_batch_id"].tolist() == [1, 2, 3] and rows["total"].tolist() == [1, 3, 6]


def test_progress_reports_a_batch_once_its_output_is_readable(spark, warehouse):
    pipeline = _pipeline("progress_durable", running_total)
    for x in (1, 2, 3, 4):
        pipeline.publish(spark, [{"k": 1, "x": x}], warehouse)
    readable = []

    def progress(batch):
        written = sink_rows(spark, pipeline, warehouse, "out")["_batch_id"]
        readable.append((batch.batch_id, int(written.max())))

    pipeline.run_once(spark, warehouse, progress=progress)
    assert [batch for batch, _ in readable] == [1, 2, 3, 4]
    assert all(last >= batch for batch, last in readable)


def test_with_hooks_each_checkpoint_finishes_before_the_next_batch_computes(spark, warehouse):
    calls = []

    class Recorder(sp.Hooks):
        def on_checkpoint(self, ctx):
            calls.append("checkpoint")
        def on_post_checkpoint(self, ctx, checkpoint_id): calls.append(f"post:{checkpoint_id}")

    def count(data):
        calls.append(f"batch:{int(data['x'].iloc[0])}")
        return data

    pipeline = ((sp.read.from_callback("in", schema={"x": "long"}, max_versions=1).map(count)
                 .write.to_delta("out")).named("hooked_batches").with_hooks(Recorder()))
    for x in (1, 2, 3):
        pipeline.publish(spark, [{"x": x}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert calls == ["batch:1", "checkpoint", "post:1", "batch:2", "checkpoint", "post:2",
                     "batch:3", "checkpoint", "post:3"]


def test_the_cyclic_collector_pauses_while_operators_run_only(spark, warehouse):
    seen = []

    def observe(data):
        seen.append(gc.isenabled())
        return data

    pipeline = (sp.read.from_callback("in", schema={"x": "long"}).map(observe)
                .write.to_delta("out")).named("gc_paused")
    pipeline.publish(spark, [{"x": 1}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert seen == [False] and gc.isenabled()

    gc.disable()  # an application that turned it off keeps it off
    try:
        pipeline.publish(spark, [{"x": 2}], warehouse)
        pipeline.run_once(spark, warehouse)
        assert not gc.isenabled()
    finally:
        gc.enable()
