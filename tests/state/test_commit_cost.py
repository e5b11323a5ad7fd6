"""What keeps the per-batch commits cheap: transaction ids worked out in the background before
the next idempotent append, and no file statistics on the state table's strings."""

import json
import os

import pandas as pd

from state import STATE_SCHEMA, CheckpointLog, PipelineLayout, tables

ROW = pd.DataFrame({"k": [1], "x": [2]})


def jobs_of(spark, group: str, action) -> int:
    """How many Spark jobs ``action`` ran."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        action()
    finally:
        context.setJobGroup("", "")
    return len(context.statusTracker().getJobIdsForGroup(group))


def test_a_warmed_table_takes_its_next_idempotent_append_in_one_job(spark, tmp_path):
    path = str(tmp_path / "sink")
    tables.append(tables.to_frame(spark, ROW), path, txn=("p/sink", 1))
    cold = jobs_of(spark, "cold", lambda: tables.append(tables.to_frame(spark, ROW), path,
                                                        txn=("p/sink", 2)))
    tables.warm_transaction_ids(spark)
    tables._WARMER.submit(lambda: None).result()       # both threads were busy with the warm-up
    tables._WARMER.submit(lambda: None).result()
    warm = jobs_of(spark, "warm", lambda: tables.append(tables.to_frame(spark, ROW), path,
                                                        txn=("p/sink", 3)))
    assert cold > 1 and warm == 1, (cold, warm)   # the write job alone; Delta knew the ids
    tables.append(tables.to_frame(spark, ROW), path, txn=("p/sink", 3))   # still idempotent
    assert tables.read(spark, path).count() == 3


def test_the_state_table_keeps_statistics_of_checkpoint_ids_only(spark, tmp_path):
    layout = PipelineLayout(str(tmp_path), "p")
    CheckpointLog(spark, layout).ensure_table()
    rows = pd.DataFrame({"operator": ["op"], "key": ["[1,2]"], "value": ['{"n":1}'],
                         "deleted": [False], "checkpoint_id": [1]})
    tables.append(tables.to_frame(spark, rows, STATE_SCHEMA), layout.state,
                  partition_by=("operator",))
    with open(os.path.join(layout.state, "_delta_log", f"{1:020d}.json")) as commit:
        adds = [json.loads(line)["add"] for line in commit if '"add"' in line]
    stats = json.loads(adds[0]["stats"])
    assert stats["numRecords"] == 1 and set(stats["minValues"]) == {"checkpoint_id"}
