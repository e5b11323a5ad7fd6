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


def test_aggregates_of_a_first_batch_of_nulls_are_typed_by_the_declared_input(spark, warehouse):
    schema = {"k": "string", "x": "long", "y": "double", "s": "string"}
    pipeline = (sp.read.from_callback("in", key="k", schema=schema, max_versions=1)
                .group_by("k").agg(total=sp.sum_("x"), top=sp.max_("y"),
                                   last=sp.latest_by_offset("s"), n=sp.count("x"))
                .write.to_table("t")).named("typed_aggregates")
    pipeline.publish(spark, [{"k": "a", "x": None, "y": None, "s": None}], warehouse)
    pipeline.run_once(spark, warehouse)  # every aggregate null: the table's columns are typed
    pipeline.publish(spark, [{"k": "a", "x": 3, "y": 1.5, "s": "hi"}], warehouse)
    pipeline.run_once(spark, warehouse)  # failed with CAST(total AS VOID) when typed by values

    table = spark.read.format("delta").load(pipeline.table_path("t", warehouse))
    types = {f.name: f.dataType.simpleString() for f in table.schema.fields}
    assert [types[c] for c in ("total", "top", "last", "n")] == ["bigint", "double", "string",
                                                                "bigint"]
    assert table.select("total", "top", "last", "n").collect()[0].asDict() == {
        "total": 3, "top": 1.5, "last": "hi", "n": 1}


def test_reading_a_sink_at_a_warehouse_the_pipeline_never_ran_at_names_where_it_looked(
        spark, warehouse, tmp_path, monkeypatch):
    pipeline = (sp.read.from_callback("in", schema={"k": "string", "x": "long"})
                .write.to_delta("out").named("p"))
    pipeline.publish(spark, [{"k": "a", "x": 1}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert pipeline.read_sink(spark, "out", warehouse)["x"].tolist() == [1]
    monkeypatch.delenv("LAKESTREAM_WAREHOUSE", raising=False)
    monkeypatch.chdir(tmp_path)
    mistyped = str(tmp_path / "warehose")
    with pytest.raises(sp.ConfigError) as raised:
        pipeline.read_sink(spark, "out", mistyped)
    message = str(raised.value)
    assert f"not run at warehouse {mistyped}" in message and f"{mistyped}/p/_batches" in message
    assert f"./warehouse = {tmp_path}/warehouse" in message  # where it would look by default
    monkeypatch.setenv("LAKESTREAM_WAREHOUSE", warehouse + "2")
    with pytest.raises(sp.ConfigError, match=f"LAKESTREAM_WAREHOUSE = {warehouse}2"):
        pipeline.read_sink(spark, "out")


def test_a_sink_with_no_rows_yet_reads_as_no_rows_with_its_columns(spark, warehouse):
    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
                .filter(lambda rows: rows["x"] > 10).write.to_delta("big")
                .named("p"))
    pipeline.publish(spark, [{"k": "a", "x": 1}], warehouse)
    pipeline.run_once(spark, warehouse)  # a batch ran, and wrote nothing
    rows = pipeline.read_sink(spark, "big", warehouse)
    assert rows.empty and {BATCH_COLUMN, ROW_COLUMN} <= set(rows.columns)
    table = sp.TableSink("t", keys=("k",))
    assert list(table.read(spark, PipelineLayout(warehouse, "p")).columns) == ["k"]
