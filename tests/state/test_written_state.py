"""State written as ``_state`` files by the processes that changed it (Spark's executors), and
committed by the driver with its checkpoint's record in one delta-rs commit: the files are
read only once committed, a checkpoint's commit happens once, and readers prune them by the
statistics their actions carry."""

import json

import pandas as pd
import pytest

import ops as sp
from ops.testing import run_records
from state import PipelineLayout, delta_io, tables, takes_state_files, write_state_files
from state.checkpoint import STATE_SCHEMA, STATE_TABLE_PROPERTIES
from state.lookup import stored_values


def changed(operator, keys, groups):
    return pd.DataFrame({"operator": operator, "key": [str(k) for k in keys],
                         "value": [json.dumps(k * 10) for k in keys], "deleted": False,
                         "key_group": groups})


@pytest.fixture
def state_table(tmp_path):
    """An empty ``_state`` table as a pipeline's first checkpoint makes it."""
    path = str(tmp_path / "_state")
    creation = tables.new_table(STATE_SCHEMA, ("operator",), STATE_TABLE_PROPERTIES)
    assert delta_io.create(path, creation.creation(pd.DataFrame()))
    return path


def test_files_are_read_only_once_committed_and_committed_once(state_table):
    first = write_state_files(state_table, changed("sums", [1, 2], [5, 9]), checkpoint_id=3)
    second = write_state_files(state_table, changed("sums", [3], [40]), checkpoint_id=3)
    uncommitted = write_state_files(state_table, changed("sums", [4], [7]), checkpoint_id=3)
    assert len(first) == len(second) == len(uncommitted) == 1  # a file per operator

    assert stored_values(state_table, "sums", 3, None, groups=64).num_rows == 0  # not yet
    txn = ("p/checkpoint", 3)
    assert delta_io.commit_files(state_table, first + second, txn=txn, user_metadata="cp 3")
    assert not delta_io.commit_files(state_table, first + second, txn=txn)  # seen: skipped

    read = stored_values(state_table, "sums", 3, None, groups=64).to_pandas()
    assert dict(zip(read["key"], read["value"])) == {"1": "10", "2": "20", "3": "30"}
    assert delta_io.recent_metadata(state_table) == ["cp 3"]
    assert delta_io.latest_version(state_table) == 1  # one commit, not two
    statistics = delta_io.file_statistics(state_table).to_pandas().sort_values("min.key_group")
    assert statistics[["min.key_group", "max.key_group", "min.checkpoint_id"]].values.tolist() == \
        [[5, 9, 3], [40, 40, 3]]
    # a range of groups reads only the file that can hold them
    assert stored_values(state_table, "sums", 3, None, 64, within=(32, 64)).to_pydict() == \
        {"key": ["3"], "value": ["30"]}


def running(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def test_executors_write_a_later_batchs_state_and_the_driver_commits_it(spark, tmp_path):
    """The first checkpoint makes the table (Spark); from the second on, the tasks' files and
    the record are one delta-rs commit, and the state reads as driver mode leaves it."""
    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "long", "x": "long"})
                .map(running, state=0, name="sums").write.to_delta("out")).named("written")
    batches = [[{"k": k % 7, "x": k} for k in range(30)], [{"k": k % 11, "x": 1} for k in range(20)]]
    runs = {mode: run_records(pipeline.with_mode(mode), *batches[:1], spark=spark,
                              warehouse=str(tmp_path / mode)) for mode in ("driver", "distributed")}
    layout = PipelineLayout(str(tmp_path / "distributed"), "written")
    assert takes_state_files(layout)
    for mode in runs:
        runs[mode] = run_records(pipeline.with_mode(mode), batches[1], spark=spark,
                                 warehouse=str(tmp_path / mode))

    version = delta_io.latest_version(layout.state)
    actions = delta_io.commit_actions(layout.state, version)
    info = next(action["commitInfo"] for action in actions if "commitInfo" in action)
    assert "delta-rs" in info.get("clientVersion", ""), info  # not Spark's commit
    added = [action["add"] for action in actions if "add" in action]
    operators = sorted(add["partitionValues"]["operator"] for add in added)
    assert operators.count("sums") > 1 and operators.count("__checkpoint__") == 1  # per task
    assert all(json.loads(add["stats"])["minValues"]["checkpoint_id"] == 2
               for add in added)

    def state(mode):
        frame = runs[mode].state["sums"]
        return dict(zip(frame["key"], frame["value"]))
    assert state("distributed") == state("driver") and len(state("driver")) == 11
    pd.testing.assert_frame_equal(runs["distributed"].outputs["out"].drop(columns=["_batch_id", "_row"]),
                                  runs["driver"].outputs["out"].drop(columns=["_batch_id", "_row"]))
