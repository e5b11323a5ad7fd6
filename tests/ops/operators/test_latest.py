"""as_table: a table from a stream of updates, with tombstones."""

import pandas as pd

import ops as sp


def test_a_null_value_deletes_the_key(spark, warehouse):
    pipeline = (sp.read.from_callback("prices", schema={"sym": "string", "px": "double"})
                .as_table("sym").write.to_table("latest_prices")).named("prices")
    pipeline.publish(spark, [{"sym": "A", "px": 1.0}, {"sym": "B", "px": 2.0},
                             {"sym": "A", "px": 1.5}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"sym": "B", "px": None}, {"sym": "C", "px": None}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert pipeline.read_sink(spark, "latest_prices", warehouse)[["sym", "px"]].values.tolist() == [
        ["A", 1.5]]
    path = pipeline.layout(warehouse).table("latest_prices_changelog")
    log = spark.read.format("delta").load(path).orderBy("_batch_id", "_row").toPandas()
    # changes come in the order of each key's winning (last) record of the batch
    assert list(zip(log["sym"], log["_change"])) == [("B", "insert"), ("A", "insert"), ("B", "delete")]
    pipeline.rebuild_table(spark, "latest_prices", warehouse)
    assert pipeline.read_sink(spark, "latest_prices", warehouse)[["sym", "px"]].values.tolist() == [
        ["A", 1.5]]


def test_a_timestamp_column_is_kept_and_its_old_value_shown_as_text(spark, warehouse):
    pipeline = (sp.read.from_callback("seen", schema={"who": "string", "at": "timestamp"})
                .as_table("who").write.to_table("last_seen")).named("seen")
    pipeline.publish(spark, [{"who": "a", "at": "2026-01-01T00:00:01Z"}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"who": "a", "at": "2026-01-01T00:00:05Z"}], warehouse)
    pipeline.run_once(spark, warehouse)
    table = pipeline.read_sink(spark, "last_seen", warehouse)
    assert table["at"].tolist() == [pd.Timestamp("2026-01-01T00:00:05")]  # read back as UTC
    log = (spark.read.format("delta").load(pipeline.layout(warehouse).table("last_seen_changelog"))
           .orderBy("_batch_id").toPandas())
    assert log["_change"].tolist() == ["insert", "update"]
    assert "2026-01-01T00:00:01" in log["_old"].iloc[1]
