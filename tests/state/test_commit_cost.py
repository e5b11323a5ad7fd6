"""What keeps the per-batch checkpoint commit cheap: no file statistics on the state table's
key and value strings."""

import json
import os

import pandas as pd

from state import STATE_SCHEMA, CheckpointLog, PipelineLayout, tables


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
