"""What keeps the per-batch commits cheap: transaction ids worked out in the background before
the next idempotent append (and released when the run ends), and no file statistics on the
state table's key and value strings."""

import json
import os
import threading

import pandas as pd

from state import CheckpointLog, PipelineLayout, new_checkpoint
from state.lake import tables, warming

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


def cached_states_of(spark, path: str) -> list[str]:
    """Names of the cached Delta snapshot states of the table at ``path``."""
    rdds = spark.sparkContext._jsc.sc().getPersistentRDDs()
    names = [str(rdd.name()) for rdd in spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
             .asJava(rdds).values()]
    return [name for name in names if path in name]


def append(spark, path: str, version: int) -> None:
    tables.append(tables.to_frame(spark, ROW), path, txn=("p/sink", version))


def test_a_warmed_table_takes_its_next_idempotent_append_in_one_job(spark, tmp_path):
    path = str(tmp_path / "sink")
    with warming(spark) as warmer:
        append(spark, path, 1)
        cold = jobs_of(spark, "cold", lambda: append(spark, path, 2))
        warmer.warm()
        warmer.wait()
        warm = jobs_of(spark, "warm", lambda: append(spark, path, 3))
        assert cold > 1 and warm == 1, (cold, warm)   # the write job alone: Delta knew the ids
        append(spark, path, 3)   # still idempotent
    assert tables.read(spark, path).count() == 3


def test_what_a_run_warmed_and_did_not_append_to_is_released_when_it_ends(spark, tmp_path):
    path = str(tmp_path / "sink")
    with warming(spark) as warmer:
        append(spark, path, 1)
        warmer.warm()   # as before a batch that, this time, never comes
        warmer.wait()
        assert cached_states_of(spark, path)   # the warm-up built the snapshot's state
    assert cached_states_of(spark, path) == []   # and the end of the run released it


def test_a_warm_up_under_way_never_holds_the_process_at_exit(spark, tmp_path):
    """A run's last warm-up is never used: a process that ends after its run (a sensor's, a
    job's) must not wait for it, as Python waits for a thread pool's workers at exit."""
    path = str(tmp_path / "sink")
    with warming(spark) as warmer:
        append(spark, path, 1)
        warmer.warm()
        under_way = [thread for thread in threading.enumerate()
                     if thread.name.startswith("lakestream-warm")]
        warmer.wait()
    assert under_way and all(thread.daemon for thread in under_way)


def test_the_state_table_keeps_statistics_of_checkpoint_ids_and_key_groups_only(spark, tmp_path):
    layout = PipelineLayout(str(tmp_path), "p")
    rows = pd.DataFrame({"operator": ["op"], "key": ["[1,2]"], "value": ['{"n":1}'],
                         "deleted": [False]})
    first = new_checkpoint(None, batch_id=1, offsets={}, tracked={}, markers={}, run_id="r")
    CheckpointLog(spark, layout).commit(first, rows)   # creates the table: version 0
    with open(os.path.join(layout.state, "_delta_log", f"{0:020d}.json")) as commit:
        adds = [json.loads(line)["add"] for line in commit if '"add"' in line]
    assert {add["partitionValues"]["operator"] for add in adds} == {"op", "__checkpoint__"}
    for add in adds:
        stats = json.loads(add["stats"])
        # no statistics of the key and value strings (costly, and they skip nothing); key groups
        # have them, so readers of some groups skip files (the record's group is null: no min)
        assert stats["numRecords"] == 1
        assert set(stats["minValues"]) == ({"checkpoint_id"} if add["partitionValues"]["operator"]
                                           == "__checkpoint__" else {"checkpoint_id", "key_group"})
