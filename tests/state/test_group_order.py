"""A checkpoint writes its ``_state`` rows in key-group order, in row groups of
``STATE_FILES.row_group_rows``: a fresh table, never compacted, then lets a read of a few keys skip
most of a large checkpoint's file by its row groups' statistics. Both writers: the driver's
commit (delta-rs) and the files executors write for the driver to commit."""

import json
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from state import Checkpoint, CheckpointLog, PipelineLayout, delta_io, key_groups, write_state_files
from state.contract.schema import STATE_FILE_SCHEMA, STATE_FILES
from state.read.lookup import _of_groups, stored_values

GROUPS = 256
KEYS = 100_000  # about six row groups' worth


def many_keys(operator: str) -> pd.DataFrame:
    """One row per key ``0 … KEYS-1`` of ``operator``, as JSON storage writes them."""
    keys = [str(key) for key in range(KEYS)]
    return pd.DataFrame({"operator": operator, "key": keys, "value": [json.dumps(k) for k in range(KEYS)],
                         "deleted": False})


def group_ranges(path: str, action_path: str) -> list[tuple[int, int]]:
    """Each row group's ``(min, max)`` key group in the table's data file ``action_path``."""
    metadata = pq.ParquetFile(Path(path) / unquote(action_path)).metadata
    column = metadata.schema.names.index("key_group")
    return [(metadata.row_group(n).column(column).statistics.min,
             metadata.row_group(n).column(column).statistics.max) for n in range(metadata.num_row_groups)]


def assert_in_group_order(ranges: list[tuple[int, int]]) -> None:
    assert len(ranges) == -(-KEYS // STATE_FILES.row_group_rows)
    assert all(low <= high for low, high in ranges)
    assert all(earlier[1] <= later[0] for earlier, later in zip(ranges, ranges[1:]))  # no overlap


def row_groups_read(path: str, action_path: str, keys: list[str]) -> int:
    """How many row groups of the file a read of ``keys``' groups cannot skip."""
    fragment = next(ds.dataset(str(Path(path) / unquote(action_path)), format="parquet").get_fragments())
    return len(fragment.split_by_row_group(filter=_of_groups(key_groups(keys, GROUPS), GROUPS)))


def test_a_drivers_checkpoint_of_many_keys_is_read_by_row_group_without_a_compaction(tmp_path):
    layout = PipelineLayout(str(tmp_path), "wide")
    checkpoint = Checkpoint(checkpoint_id=1, batch_id=1, run_id="test", key_groups=GROUPS)
    CheckpointLog(None, layout).commit(checkpoint, many_keys("sums"))  # type: ignore[arg-type]

    files = delta_io.file_statistics(layout.state).to_pandas()
    [ours] = files.loc[files["partition.operator"] == "sums", "path"]  # one file, as committed
    assert_in_group_order(group_ranges(layout.state, ours))
    asked = ["7", "99999"]
    assert row_groups_read(layout.state, ours, asked) <= 4 < -(-KEYS // STATE_FILES.row_group_rows)
    found = stored_values(layout.state, "sums", 1, [*asked, "100001"], GROUPS).rows.to_pydict()
    assert sorted(zip(found["key"], found["value"])) == [("7", "7"), ("99999", "99999")]


def test_files_executors_write_are_in_group_order_too(tmp_path):
    layout = PipelineLayout(str(tmp_path), "wide")
    CheckpointLog(None, layout).commit(Checkpoint(checkpoint_id=1, batch_id=1, run_id="test",
                                                  key_groups=GROUPS), pd.DataFrame())  # type: ignore[arg-type]
    rows = many_keys("sums").assign(key_group=lambda frame: key_groups(frame["key"], GROUPS))
    rows = rows.iloc[np.random.default_rng(5).permutation(KEYS)]  # as a task meets them
    [action] = write_state_files(layout.state, rows, checkpoint_id=2)
    assert delta_io.commit_files(layout.state, [action], STATE_FILE_SCHEMA, txn=("test", 2))

    written = json.loads(action)["path"]
    assert_in_group_order(group_ranges(layout.state, written))
    assert row_groups_read(layout.state, written, ["7"]) <= 2
    found = stored_values(layout.state, "sums", 2, ["7", "8"], GROUPS).rows.to_pydict()
    assert sorted(found["value"]) == ["7", "8"]
    assert stored_values(layout.state, "sums", 2, None, GROUPS).rows.num_rows == KEYS
