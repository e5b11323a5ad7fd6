"""The operations on a pipeline's state: reads as of old checkpoints and changed keys, then
compaction (the reads unchanged, runs going on), and vacuum (the latest state and the session's
settings kept)."""

import pandas as pd
import pytest

import ops as sp
from tests.ops.test_managed_state import _keyed, add_x


def test_read_state_as_of_old_checkpoints_and_after_compaction(spark, warehouse):
    pipeline = _keyed("history", add_x)
    for rows in ([{"k": 1, "x": 1}, {"k": 2, "x": 10}], [{"k": 1, "x": 2}], [{"k": 3, "x": 5}]):
        pipeline.publish(spark, rows, warehouse)
    pipeline.run_once(spark, warehouse)
    before = {c: sp.read_state(spark, pipeline, "add_x", as_of=c, warehouse=warehouse)
              for c in (1, 2, 3)}
    assert dict(zip(before[1]["key"], before[1]["value"])) == {1: 1, 2: 10}
    assert dict(zip(before[3]["key"], before[3]["value"])) == {1: 3, 2: 10, 3: 5}
    changed = sp.changed_keys(spark, pipeline, "add_x", after=1, warehouse=warehouse)
    assert dict(zip(changed["key"], changed["value"])) == {1: 3, 3: 5}

    kept = sp.compact(spark, pipeline, warehouse)
    assert kept == 3 + 3  # three keys, three checkpoint records
    for c in (1, 2, 3):  # latest read identical; older ones through time travel
        pd.testing.assert_frame_equal(
            sp.read_state(spark, pipeline, "add_x", as_of=c, warehouse=warehouse), before[c])
    pipeline.publish(spark, [{"k": 1, "x": 100}], warehouse)
    pipeline.run_once(spark, warehouse)  # runs continue on a compacted changelog
    latest = sp.read_state(spark, pipeline, "add_x", warehouse=warehouse)
    assert dict(zip(latest["key"], latest["value"])) == {1: 103, 2: 10, 3: 5}
    with pytest.raises(sp.StreamError, match="checkpoints 1..4, not 9"):
        sp.read_state(spark, pipeline, "add_x", as_of=9, warehouse=warehouse)


def test_vacuum_removes_old_files_keeps_the_latest_state_and_the_session_settings(spark, warehouse):
    pipeline = _keyed("vacuumed", add_x)
    for rows in ([{"k": 1, "x": 1}], [{"k": 1, "x": 2}, {"k": 2, "x": 3}]):
        pipeline.publish(spark, rows, warehouse)
    pipeline.run_once(spark, warehouse)
    sp.compact(spark, pipeline, warehouse)  # the files it replaced are left for vacuum
    latest = sp.read_state(spark, pipeline, "add_x", warehouse=warehouse)
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    settings = {key: spark.conf.get(key, None)
                for key in (listing, "spark.databricks.delta.retentionDurationCheck.enabled")}

    removed = sp.vacuum(spark, pipeline, retention_hours=0, warehouse=warehouse)
    assert removed[pipeline.layout(warehouse).state] > 0
    pd.testing.assert_frame_equal(sp.read_state(spark, pipeline, "add_x", warehouse=warehouse), latest)
    assert {key: spark.conf.get(key, None) for key in settings} == settings
    with pytest.raises(ValueError, match="retention_hours must be >= 0"):
        sp.vacuum(spark, pipeline, retention_hours=-1, warehouse=warehouse)
