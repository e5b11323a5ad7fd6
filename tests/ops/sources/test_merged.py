"""merge: one stream from several sources, each keeping its own position."""

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
