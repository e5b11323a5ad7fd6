"""merge (one stream from several sources) and tables from update streams with tombstones."""

import pytest

import ops as sp


def test_merged_callbacks_form_one_keyed_stream(spark, warehouse):
    schema = {"k": "string", "x": "long"}
    pipeline = (sp.read.from_callback("left", key="k", schema=schema)
                .merge(sp.read.from_callback("right", key="k", schema=schema))
                .group_by("k").agg(total=sp.sum_("x")).write.to_table("totals")).named("merged")
    pipeline.publish(spark, [{"k": "a", "x": 1}], warehouse, source="left")
    pipeline.publish(spark, [{"k": "a", "x": 10}, {"k": "b", "x": 5}], warehouse, source="right")
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"k": "b", "x": 2}], warehouse, source="left")
    assert pipeline.run_once(spark, warehouse).rows_in == 1  # each source resumes on its own
    table = pipeline.read_sink(spark, "totals", warehouse)
    assert table[["k", "total"]].values.tolist() == [["a", 11], ["b", 7]]
    with pytest.raises(sp.PipelineDefinitionError, match="pass source="):
        pipeline.publish(spark, [{"k": "a", "x": 1}], warehouse)


def test_merge_refuses_streams_with_operators():
    stream = sp.read.from_callback("a", schema={"x": "long"}).filter(lambda d: d["x"] > 0)
    with pytest.raises(sp.PipelineDefinitionError, match="before map, filter"):
        stream.merge(sp.read.from_callback("b", schema={"x": "long"}))


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
