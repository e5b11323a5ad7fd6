"""Sources whose records change shape under a running pipeline: a column gained, dropped or
retyped, in a Delta table source and in JSON records (callback here; Kafka checks its records
the same way). What happens is what the docs' "Sources that change shape"
says (docs/pages/guides/changing-pipelines.md)."""

import pandas as pd
import pytest

import ops as sp
from tests.helpers import dead_letters

FEED = ("delta.enableChangeDataFeed", "true")


def _write(spark, path, rows, schema, mode="append", **options):
    writer = spark.createDataFrame(rows, schema).write.format("delta").mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(path)


def _rows(spark, pipeline, warehouse, *columns):
    out = pipeline.read_sink(spark, "out", warehouse)
    return [[None if pd.isna(v) else v for v in row] for row in out[list(columns)].values.tolist()]


def test_a_delta_source_gains_a_column_then_drops_it(spark, warehouse, tmp_path):
    path = str(tmp_path / "events")
    _write(spark, path, [("a", 1)], "k string, x long", **{FEED[0]: FEED[1]})
    pipeline = sp.read.from_delta(path, key="k", name="events").write.to_delta("out").named("ev")
    pipeline.run_once(spark, warehouse)
    _write(spark, path, [("b", 2)], "k string, x long")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (note string)")
    _write(spark, path, [("c", 3, "hi")], "k string, x long, note string")
    pipeline.run_once(spark, warehouse)  # one batch across the change: older rows have no note
    assert _rows(spark, pipeline, warehouse, "k", "x", "note") == [
        ["a", 1, None], ["b", 2, None], ["c", 3, "hi"]]
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = "
              "'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    spark.sql(f"ALTER TABLE delta.`{path}` DROP COLUMN note")
    _write(spark, path, [("d", 4)], "k string, x long")
    pipeline.run_once(spark, warehouse)
    assert _rows(spark, pipeline, warehouse, "k", "note")[-1] == ["d", None]


def test_a_delta_source_whose_column_changes_type_stops_naming_it(spark, warehouse, tmp_path):
    path = str(tmp_path / "events")
    _write(spark, path, [("a", 1)], "k string, x long", **{FEED[0]: FEED[1]})
    pipeline = sp.read.from_delta(path, key="k", name="events").write.to_delta("out").named("ev")
    pipeline.run_once(spark, warehouse)
    _write(spark, path, [("b", "two")], "k string, x string", mode="overwrite",
           overwriteSchema="true")
    with pytest.raises(sp.StreamError, match=r"(?s)'x'.*version 1"):
        pipeline.run_once(spark, warehouse)
    assert _rows(spark, pipeline, warehouse, "k", "x") == [["a", 1]]


def test_json_records_gaining_a_field_and_changing_a_type(spark, warehouse):
    pipeline = (sp.read.from_callback("publish", key="k", schema={"k": "string", "x": "long"})
                .write.to_delta("out")).named("json")
    pipeline.publish(spark, [{"k": "a", "x": 1}], warehouse)
    pipeline.run_once(spark, warehouse)
    # a field the schema does not declare passes through: the sink gains the column
    pipeline.publish(spark, [{"k": "b", "x": 2, "note": "hi"}, {"k": "c", "x": "three"}],
                     warehouse)
    pipeline.run_once(spark, warehouse)
    assert _rows(spark, pipeline, warehouse, "k", "x", "note") == [["a", 1, None],
                                                                   ["b", 2, "hi"]]
    letters = dead_letters(spark, pipeline, warehouse)
    assert letters["reason"].tolist() == ["field 'x' 'three' is not an integer; expected long"]
    # a declared field that stops coming is null
    pipeline.publish(spark, [{"k": "d"}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert _rows(spark, pipeline, warehouse, "k", "x")[-1] == ["d", None]
    # an undeclared field that changes type reaches the sink as another column type: it stops
    pipeline.publish(spark, [{"k": "e", "x": 5, "note": 8}], warehouse)
    with pytest.raises(sp.SinkError, match=r"sink 'out', batch 4: column 'note' of the batch's "
                                           r"rows has another type"):
        pipeline.run_once(spark, warehouse)
    assert _rows(spark, pipeline, warehouse, "k")[-1] == ["d"]  # nothing of the batch written


def test_a_field_missing_from_the_first_batch_arrives_later(spark, warehouse):
    """The first batch lacks the optional ``note`` everywhere, so the Delta sink's column is
    typed from nulls alone (void); a later batch's notes give it its type, and every batch
    reads back (delta-rs once wrote the void column into its files, unreadable after that)."""
    pipeline = (sp.read.from_callback("events", schema={"k": "string", "note": "string"})
                .write.to_delta("out")).named("optional_note")
    for batch in ([{"k": "a"}], [{"k": "b", "note": "x"}], [{"k": "c", "note": "y"}]):
        pipeline.publish(spark, batch, warehouse)
        pipeline.run_once(spark, warehouse)
    rows = pipeline.read_sink(spark, "out", warehouse)
    assert [(k, None if pd.isna(n) else n) for k, n in zip(rows["k"], rows["note"])] == [
        ("a", None), ("b", "x"), ("c", "y")]
