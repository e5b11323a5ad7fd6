"""Sinks: idempotent writes by batch id, reading back what is stored, and which sinks can."""

import pandas as pd
import pytest

import ops as sp
from ops import BATCH_COLUMN, ROW_COLUMN, PipelineDefinitionError, RunContext
from state import PipelineLayout


def context(spark, warehouse, epoch=0):
    return RunContext(spark, PipelineLayout(warehouse, "p"), epoch, run_id="test")


def test_a_delta_sink_writes_a_batch_once_however_often_it_is_replayed(spark, warehouse):
    sink, ctx = sp.DeltaSink("out"), context(spark, warehouse)
    frame = pd.DataFrame({"x": [3, 1, 2]})
    for _ in range(2):
        sink.write(ctx, 1, frame)
    sink.write(ctx, 2, frame.head(1))
    rows = sink.read(spark, ctx.layout)
    assert rows[["x", BATCH_COLUMN, ROW_COLUMN]].values.tolist() == [
        [3, 1, 0], [1, 1, 1], [2, 1, 2], [3, 2, 0]]
    sink.discard_after(ctx, 1)
    assert sink.read(spark, ctx.layout)[BATCH_COLUMN].tolist() == [1, 1, 1]


def test_stored_sinks_name_their_tables_and_the_console_is_not_readable(spark, warehouse):
    layout = PipelineLayout(warehouse, "p")
    assert sp.TableSink("t", keys=("k",)).tables(layout) == [layout.table("t"),
                                                             layout.table("t_changelog")]
    assert sp.DeltaSink("d", path="/elsewhere/d").tables(layout) == ["/elsewhere/d"]
    pipeline = sp.read.from_callback("in").write.to_console().named("p")
    assert not isinstance(pipeline.sink("console"), sp.StoredSink)
    with pytest.raises(PipelineDefinitionError, match="'console' of 'p' is not stored in Delta"):
        pipeline.read_sink(spark, "console", warehouse)


def test_to_table_needs_an_operator_that_emits_table_changes():
    with pytest.raises(PipelineDefinitionError, match="to_table needs an aggregation"):
        sp.read.from_callback("in").map(lambda data: data).write.to_table("t")
