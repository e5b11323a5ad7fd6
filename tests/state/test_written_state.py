"""State and sink rows written as Delta data files by the processes that made them (Spark's
executors), and committed by the driver (the state with its checkpoint's record) in one
delta-rs commit each: the files are read only once committed, a commit happens once, and
readers prune state files by the statistics their actions carry."""

import json

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import ops as sp
from ops.context import RunContext
from ops.testing import run_records
from state import PipelineLayout, StorageError, delta_io, takes_state_files, write_state_files
from state.contract.schema import STATE_FILE_SCHEMA, STATE_SCHEMA, STATE_TABLE_PROPERTIES
from state.lake import tables
from state.read.lookup import stored_values
from tests.helpers import last_commit


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

    assert stored_values(state_table, "sums", 3, None, groups=64).rows.num_rows == 0  # not yet
    txn = ("p/checkpoint", 3)
    assert delta_io.commit_files(state_table, first + second, STATE_FILE_SCHEMA, txn=txn,
                                 user_metadata="cp 3")
    assert not delta_io.commit_files(state_table, first + second, STATE_FILE_SCHEMA,
                                     txn=txn)  # seen: skipped

    read = stored_values(state_table, "sums", 3, None, groups=64).rows.to_pandas()
    assert dict(zip(read["key"], read["value"])) == {"1": "10", "2": "20", "3": "30"}
    assert delta_io.recent_metadata(state_table) == ["cp 3"]
    assert delta_io.latest_version(state_table) == 1  # one commit, not two
    statistics = delta_io.file_statistics(state_table).to_pandas().sort_values("min.key_group")
    assert statistics[["min.key_group", "max.key_group", "min.checkpoint_id"]].values.tolist() == \
        [[5, 9, 3], [40, 40, 3]]
    # a range of groups reads only the file that can hold them
    assert stored_values(state_table, "sums", 3, None, 64, within=(32, 64)).rows.to_pydict() == \
        {"key": ["3"], "value": ["30"]}


def test_files_are_not_committed_to_a_table_that_changed_since_they_were_written(tmp_path):
    path = str(tmp_path / "out")
    write_deltalake(path, pa.table({"x": pa.array([1], pa.int64())}))
    schema = delta_io.file_schema(path)
    action = delta_io.write_file(path, pa.table({"x": pa.array([2], pa.int64())}), {})
    # meanwhile another writer adds a column: the file written without it must not be committed
    write_deltalake(path, pa.table({"x": pa.array([3], pa.int64()), "y": ["new"]}),
                    mode="append", schema_mode="merge")
    with pytest.raises(StorageError, match="changed while this batch was written"):
        delta_io.commit_files(path, [action], schema, txn=("p/sink/out", 1))
    assert delta_io.latest_version(path) == 1  # nothing committed: only the other writer's
    assert sorted(pa.table(DeltaTable(path).to_pyarrow_table())["x"].to_pylist()) == [1, 3]


def test_a_partitioned_or_missing_sink_table_gives_no_file_target(tmp_path):
    """The tasks write no files for a table whose files need partition values, or none yet."""
    partitioned, plain = str(tmp_path / "partitioned"), str(tmp_path / "plain")
    columns = {"region": ["eu"], "x": pa.array([1], pa.int64()), "_batch_id": pa.array([1], pa.int64()),
               "_row": pa.array([0], pa.int64())}
    write_deltalake(partitioned, pa.table(columns), partition_by=["region"])
    write_deltalake(plain, pa.table(columns))
    ctx = RunContext(None, PipelineLayout(str(tmp_path), "p"), epoch=0, run_id="r")
    assert sp.DeltaSink("out", path=partitioned).file_target(ctx) is None
    assert sp.DeltaSink("out", path=str(tmp_path / "none")).file_target(ctx) is None
    target = sp.DeltaSink("out", path=plain).file_target(ctx)
    assert target is not None and target.schema.names == ["region", "x", "_batch_id", "_row"]
    assert "AWS" not in repr(target)  # its object-store settings stay out of logs


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

    actions = last_commit(layout.state)
    added = [action["add"] for action in actions if "add" in action]
    operators = sorted(add["partitionValues"]["operator"] for add in added)
    assert operators.count("sums") > 1 and operators.count("__checkpoint__") == 1  # per task
    assert all(json.loads(add["stats"])["minValues"]["checkpoint_id"] == 2
               for add in added)

    # the sink's files too: written by the tasks, committed by the driver (not Spark's writer)
    assert sum("add" in action for action in last_commit(layout.table("out"))) > 1

    def state(mode):
        frame = runs[mode].state["sums"]
        return dict(zip(frame["key"], frame["value"]))
    assert state("distributed") == state("driver") and len(state("driver")) == 11
    pd.testing.assert_frame_equal(runs["distributed"].outputs["out"].drop(columns=["_batch_id", "_row"]),
                                  runs["driver"].outputs["out"].drop(columns=["_batch_id", "_row"]))


def noting(op, md, data):
    """The running sum; from the second batch on, key 3's rows gain a column."""
    out = running(op, md, data)
    return out.assign(note="three") if md.key == 3 and sp.get(op, md) > 54 else out


def test_a_batch_whose_rows_the_table_does_not_take_as_they_are_is_written_by_the_sink(
        spark, tmp_path):
    """One task's rows gain a column: that task writes no file, so the sink writes the whole
    batch itself (adding the column); the files the other tasks wrote are never committed, and
    no row is there twice."""
    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "long", "x": "long"})
                .map(noting, state=0, name="sums").write.to_delta("out")).named("noted")
    batches = [[{"k": k % 7, "x": k} for k in range(30)], [{"k": k % 11, "x": 1} for k in range(20)]]
    runs = {mode: [run_records(pipeline.with_mode(mode), batch, spark=spark,
                               warehouse=str(tmp_path / mode)) for batch in batches][-1]
            for mode in ("driver", "distributed")}
    last_commit(PipelineLayout(runs["distributed"].warehouse, "noted").table("out"), by="Spark")
    got, expected = (runs[mode].outputs["out"].drop(columns="_row")
                     .sort_values(["_batch_id", "k", "total"], ignore_index=True) for mode in runs)
    assert len(got) == 50 and (got["note"] == "three").sum() == 2
    pd.testing.assert_frame_equal(got[expected.columns], expected, check_dtype=False)
