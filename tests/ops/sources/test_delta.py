"""A Delta table source whose table has no change data feed: what can be read without it is, a
commit that only the feed could give is refused before it is planned (nothing recorded), and a
plan recorded before that check is discarded with ``sp.discard_plans`` without losing a row."""

import json
import time

import pytest
from delta.tables import DeltaTable

import ops as sp
from ops import ConfigError, RunContext
from ops.sources import delta_inserts
from state import BatchPlan, BatchPlans
from state.lake import tables
from tests.helpers import dead_letters

FEED_ON = "(delta.enableChangeDataFeed = true)"


def append(spark, path, *rows):
    spark.createDataFrame(list(rows), "k string, x long").write.format("delta").mode("append") \
        .save(path)


def merge(spark, path, *rows):
    """Upsert ``rows`` by ``k``: matched rows are updated, the others inserted."""
    source = spark.createDataFrame(list(rows), "k string, x long")
    (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.k = s.k")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())


def feed_on(spark, path):
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES {FEED_ON}")


def pipeline_of(path):
    return sp.read.from_delta(path, key="k", name="events").write.to_delta("out").named("no_feed")


def delivered(spark, pipeline, warehouse):
    return pipeline.read_sink(spark, "out", warehouse)[["k", "x"]].values.tolist()


def plans(spark, pipeline, warehouse):
    path = pipeline.layout(warehouse).batches
    rows = tables.read(spark, path).orderBy("epoch", "batch_id").collect() \
        if tables.exists(spark, path) else []
    return [(row["epoch"], row["batch_id"], row["ranges"].replace(', "order:rows": "source"', ""))
            for row in rows]


def record_plan(spark, pipeline, warehouse, batch_id, start, end, epoch=0):
    """A plan as lakestream recorded it before it checked plans: one slice up to the latest."""
    BatchPlans(spark, pipeline.layout(warehouse)).record(
        [BatchPlan(batch_id, {"events": (start, end)}, planned_at=time.time())], epoch, "old-run")


def test_appends_updates_and_deletes_are_read_without_the_feed(spark, warehouse, tmp_path):
    path = str(tmp_path / "events")
    append(spark, path, ("a", 1), ("b", 2))                                    # version 0
    pipeline = pipeline_of(path)
    assert pipeline.run_once(spark, warehouse).rows_in == 2
    DeltaTable.forPath(spark, path).update("k = 'a'", {"x": "10"})           # 1: inserts nothing
    DeltaTable.forPath(spark, path).delete("k = 'b'")                         # 2: inserts nothing
    append(spark, path, ("c", 3))                                             # 3
    assert pipeline.run_once(spark, warehouse).rows_in == 1
    assert delivered(spark, pipeline, warehouse) == [["a", 1], ["b", 2], ["c", 3]]
    # distributed mode reads through the feed; versions it does not hold are read on the driver
    ctx = RunContext(spark, pipeline.layout(warehouse), 0, "test")
    frame = pipeline.source.read_frame(ctx, 0, 3).good.toPandas()
    assert frame[["k", "x"]].values.tolist() == [["c", 3]]


def test_a_commit_only_the_feed_could_give_is_refused_before_it_is_planned(spark, warehouse,
                                                                         tmp_path):
    path = str(tmp_path / "events")
    append(spark, path, ("a", 1), ("b", 2))                                    # version 0
    merge(spark, path, ("a", 10), ("c", 3))                                    # 1: inserts c
    append(spark, path, ("d", 4))                                             # 2
    pipeline = pipeline_of(path)
    for _ in range(2):  # the versions before it run; then every run stops at it, the same way
        with pytest.raises(ConfigError) as refused:
            pipeline.run_once(spark, warehouse)
        message = str(refused.value)
        assert "pipeline 'no_feed', source 'events': version 1 of the Delta table" in message
        assert f"{path} is a MERGE that changed rows other than by appending" in message
        assert f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES {FEED_ON}" in message
        assert delivered(spark, pipeline, warehouse) == [["a", 1], ["b", 2]]
        assert plans(spark, pipeline, warehouse) == [(0, 1, '{"events": [-1, 0]}')]


def test_discarding_a_plan_no_read_can_give_loses_nothing(spark, warehouse, tmp_path):
    path = str(tmp_path / "events")
    append(spark, path, ("a", 1), ("b", 2))                                    # version 0
    pipeline = pipeline_of(path)
    pipeline.run_once(spark, warehouse)                                       # checkpoint 1
    append(spark, path, ("c", 3))                                             # 1: feed off
    feed_on(spark, path)                                                      # 2
    merge(spark, path, ("a", 10), ("e", 5))                                   # 3: inserts e
    append(spark, path, ("f", 6))                                             # 4
    record_plan(spark, pipeline, warehouse, 2, 0, 4)  # the feed cannot give version 1

    with pytest.raises(ConfigError, match=r"recorded plan of versions 1\.\.4 .* cannot be read: "
                       r"\[DELTA_MISSING_CHANGE_DATA\].*ops\.discard_plans\(spark, pipeline\)"):
        pipeline.run_once(spark, warehouse)
    sp.discard_plans(spark, pipeline, warehouse)
    report = pipeline.run_once(spark, warehouse)
    assert [batch.rows_in for batch in report.batches] == [1, 2]  # 1 from files, 2..4 from the feed
    assert delivered(spark, pipeline, warehouse) == [["a", 1], ["b", 2], ["c", 3], ["e", 5],
                                                     ["f", 6]]
    assert [plan[:2] for plan in plans(spark, pipeline, warehouse)] == [(0, 1), (0, 2), (1, 2),
                                                                        (1, 3)]
    with pytest.raises(sp.StreamError, match="no batch plan is recorded after checkpoint 5 "
                       r"\(batch 3, epoch 1\), so there is nothing to discard"):
        sp.discard_plans(spark, pipeline, warehouse)
    assert sp.checkpoint_problems(spark, pipeline, warehouse) == []


def test_discarding_plans_before_the_first_checkpoint(spark, warehouse, tmp_path):
    path = str(tmp_path / "events")
    append(spark, path, ("a", 1))                                             # version 0
    feed_on(spark, path)                                                      # 1
    merge(spark, path, ("a", 10), ("b", 2))                                   # 2: inserts b
    pipeline = pipeline_of(path)
    with pytest.raises(sp.StreamError, match="no batch plan is recorded and it has no checkpoint"):
        sp.discard_plans(spark, pipeline, warehouse)
    record_plan(spark, pipeline, warehouse, 1, -1, 2)
    with pytest.raises(ConfigError, match="recorded plan of versions 0..2"):
        pipeline.run_once(spark, warehouse)
    sp.discard_plans(spark, pipeline, warehouse)
    report = pipeline.run_once(spark, warehouse)
    assert [batch.rows_in for batch in report.batches] == [1, 1]  # 0..1 from files, 2 from the feed
    assert report.checkpoint_id == 4  # 1: the reset, 2: its cleanup, then one per batch
    assert delivered(spark, pipeline, warehouse) == [["a", 1], ["b", 2]]


def test_a_source_and_warehouse_on_s3_plan_appends_without_spark_and_discard_plans(
        spark, s3_warehouse):
    path = f"{s3_warehouse}/events"
    (spark.createDataFrame([("a", 1)], "k string, x long").write.format("delta")
     .option("delta.enableChangeDataFeed", "true").save(path))              # 0, the feed on
    pipeline = pipeline_of(path)
    pipeline.run_once(spark, s3_warehouse)                                   # checkpoint 1
    append(spark, path, ("b", 2))                                             # 1: a blind append
    assert delta_inserts.appends_read_without_spark(path, 1, 1)  # planned and read by delta-rs
    pipeline.run_once(spark, s3_warehouse)                                   # checkpoint 2
    assert delivered(spark, pipeline, s3_warehouse) == [["a", 1], ["b", 2]]
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = false)")
    merge(spark, path, ("a", 10), ("c", 3))                                   # 3: inserts c
    feed_on(spark, path)                                                      # 4
    append(spark, path, ("d", 4))                                             # 5
    assert not delta_inserts.appends_read_without_spark(path, 2, 5)
    record_plan(spark, pipeline, s3_warehouse, 3, 1, 5)  # the feed cannot give version 3

    with pytest.raises(ConfigError, match=r"recorded plan of versions 2\.\.5 .* cannot be read: "
                       r"\[DELTA_MISSING_CHANGE_DATA\].*ops\.discard_plans\(spark, pipeline\)"):
        pipeline.run_once(spark, s3_warehouse)
    sp.discard_plans(spark, pipeline, s3_warehouse)
    with pytest.raises(ConfigError, match=r"versions 2\.\.5 of the Delta table .* can only be read "
                       r"through its change data feed, which does not hold them"):
        pipeline.run_once(spark, s3_warehouse)  # refused before it is planned: nothing recorded
    assert delivered(spark, pipeline, s3_warehouse) == [["a", 1], ["b", 2]]
    assert sp.checkpoint_problems(spark, pipeline, s3_warehouse) == []


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_rows_keep_the_tables_order_and_a_plan_from_before_that_replays_sorted(spark, warehouse,
                                                                               tmp_path, mode):
    path = str(tmp_path / "events")
    append(spark, path, ("b", 2), ("a", 1), ("c", 3))                         # version 0
    append(spark, path, ("z", 9), ("y", 8))                                   # 1
    pipeline = pipeline_of(path).with_mode(mode)
    old = BatchPlan(1, {"events": (-1, 0)}, planned_at=time.time(), sorted_rows=True)
    BatchPlans(spark, pipeline.layout(warehouse)).record([old], 0, "an-earlier-release")
    pipeline.run_once(spark, warehouse)
    # batch 1 was planned (and may have written a sink) by a release that sorted every column:
    # its replay numbers rows as it did; batch 2, planned now, keeps the table's order
    assert delivered(spark, pipeline, warehouse) == [["a", 1], ["b", 2], ["c", 3], ["z", 9], ["y", 8]]
    assert [plan[2] for plan in plans(spark, pipeline, warehouse)] == ['{"events": [-1, 0]}',
                                                                       '{"events": [0, 1]}']


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_rows_with_a_null_key_go_to_dead_letters_and_the_others_on_in_order(spark, warehouse,
                                                                            tmp_path, mode):
    """Whether read from the files an append added or, for a merge, from the change feed, a
    row with a null key is a dead letter and the others keep their order."""
    path = str(tmp_path / "events")
    append(spark, path, ("b", 2), (None, 7), ("a", 1), (None, 5))
    pipeline = pipeline_of(path).with_mode(mode)
    pipeline.run_once(spark, warehouse)
    feed_on(spark, path)
    merge(spark, path, ("c", 3), (None, 6))
    pipeline.run_once(spark, warehouse)

    assert delivered(spark, pipeline, warehouse) == [["b", 2], ["a", 1], ["c", 3]]
    letters = dead_letters(spark, pipeline, warehouse)
    assert set(letters["reason"]) == {"key field(s) ['k'] null"}
    assert sorted(json.loads(raw)["x"] for raw in letters["raw"]) == [5, 6, 7]
