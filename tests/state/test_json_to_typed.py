"""State written by a release before typed state (the JSON fixture) moves to typed columns by a
migration, and back: a pipeline that now declares ``state_type=`` is refused until then, the
conversion keeps every value and key group, runs carry on from it, a reset undoes it, and a
value the type cannot hold stops it with nothing written. Crash tests kill a child at each step
of a conversion's commit."""

import shutil
import signal
import subprocess
import sys

import duckdb
import pytest
from deltalake import DeltaTable

import ops as sp
from state import CheckpointLog, MigrationError, PipelineChangedError, encode_key
from tests.state.fixtures import json_state_v1 as v1

CASES = [("int_sums", {1: 4, 2: 6, 3: 5}), ("float_sums", {"a": 2.0, "b": 3.0, "c": 2.5})]


@pytest.fixture
def fixture_copy(tmp_path) -> str:
    shutil.copytree(v1.FOLDER, tmp_path / "warehouse")
    return str(tmp_path / "warehouse")


def state_of(spark, pipeline, warehouse) -> dict:
    rows = sp.read_state(spark, pipeline, "state", warehouse=warehouse)
    return dict(zip(rows["key"], rows["value"]))


def stored_rows(pipeline, warehouse):
    return DeltaTable(pipeline.layout(warehouse).state).to_pyarrow_table(
        filters=[("operator", "=", "state")])


@pytest.mark.parametrize("name, stored", CASES)
def test_json_state_converts_to_typed_and_runs_carry_on_from_it(spark, fixture_copy, name,
                                                                stored):
    text, typed = v1.pipelines()[name], v1.pipelines(typed=True)[name]
    assert state_of(spark, text, fixture_copy) == stored
    with pytest.raises(PipelineChangedError, match=r"(?s)now declared typed .*sp\.migrate"):
        typed.run_once(spark, fixture_copy)

    report = sp.migrate(spark, typed, warehouse=fixture_copy)

    assert report.written == {"state": 3} and report.deleted == {"state": 3}
    assert state_of(spark, typed, fixture_copy) == stored  # the same values, now typed
    rows = stored_rows(typed, fixture_copy)
    latest = rows.filter(rows["checkpoint_id"].to_numpy() == report.checkpoint_id).to_pylist()
    typed_rows = {row["k__state"]: row for row in latest if row["k__state"] is not None}
    text_rows = {row["key"]: row for row in latest if row["key"] is not None}
    assert set(typed_rows) == set(stored) and all(row["deleted"] for row in text_rows.values())
    groups = {row["key"]: row["key_group"] for row in rows.to_pylist() if row["key"]}
    assert {encode_key(key): row["key_group"] for key, row in typed_rows.items()} == groups

    # runs go on from the typed state, as the text pipeline does from its own
    plain = str(fixture_copy) + "_plain"
    shutil.copytree(v1.FOLDER, plain)
    for pipeline, warehouse in ((typed, fixture_copy), (text, plain)):
        pipeline.publish(spark, v1.NEXT, warehouse)
        pipeline.run_once(spark, warehouse)
    assert state_of(spark, typed, fixture_copy) == state_of(spark, text, plain)
    state_files = DeltaTable(typed.layout(fixture_copy).state).to_pyarrow_dataset()  # noqa: F841
    kinds = duckdb.sql("SELECT DISTINCT typeof(v__state) FROM state_files "
                       "WHERE v__state IS NOT NULL").fetchall()
    assert kinds == [("BIGINT",)] if name == "int_sums" else [("DOUBLE",)]


def test_a_reset_undoes_a_conversion_and_a_migration_converts_back(spark, fixture_copy):
    text, typed = v1.pipelines()["int_sums"], v1.pipelines(typed=True)["int_sums"]
    before = CheckpointLog(spark, text.layout(fixture_copy)).latest().checkpoint_id
    sp.migrate(spark, typed, warehouse=fixture_copy)
    sp.reset_to_checkpoint(spark, text, before, warehouse=fixture_copy)
    assert state_of(spark, text, fixture_copy) == {1: 4, 2: 6, 3: 5}
    text.publish(spark, v1.NEXT, fixture_copy)
    text.run_once(spark, fixture_copy)  # the text pipeline runs on the text state again
    assert state_of(spark, text, fixture_copy) == {1: 14, 2: 6, 3: 25}

    sp.migrate(spark, typed, warehouse=fixture_copy)  # to typed, and back to text
    back = v1.pipelines(text=True)["int_sums"]  # undeclared, it would follow the typed state
    sp.migrate(spark, back, warehouse=fixture_copy)
    assert state_of(spark, text, fixture_copy) == {1: 14, 2: 6, 3: 25}
    latest = stored_rows(text, fixture_copy)
    last = latest.filter(latest["checkpoint_id"].to_numpy() == max(latest["checkpoint_id"].to_pylist()))
    assert {row["k__state"] for row in last.to_pylist() if row["deleted"]} == {1, 2, 3}


def _big(op, md, data):
    sp.set(op, md, 2**60 + int(data["x"].sum()))  # an int no float64 holds exactly
    return data


def _bigs(**typed):
    return (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
            .map(_big, state=0, name="state", **typed).write.to_delta("out")).named("bigs")


def test_a_value_the_type_cannot_hold_stops_the_conversion_with_nothing_written(spark, warehouse):
    text = _bigs(state_type="json")
    text.publish(spark, [{"k": "a", "x": 1}], warehouse)
    text.run_once(spark, warehouse)
    version = DeltaTable(text.layout(warehouse).state).version()
    with pytest.raises(MigrationError, match=r"key 'a': 1152921504606846977 does not fit .*'float64'"):
        sp.migrate(spark, _bigs(state_type=float), warehouse=warehouse)
    assert DeltaTable(text.layout(warehouse).state).version() == version
    assert state_of(spark, text, warehouse) == {"a": 2**60 + 1}


# A conversion's commit: the state's columns added to `_state` (a commit that changes no state)
# and the checkpoint not, and the checkpoint committed, not yet verified (a kill before anything
# is written is every migration's: tests/ops/runtime/test_pipeline_changes.py).
CONVERSION_STEPS = ["state_columns_added:1", "after_checkpoint_commit:1"]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", CONVERSION_STEPS)
def test_a_conversion_killed_at_each_step_leaves_the_old_state_or_the_new(spark, fixture_copy,
                                                                          crash_at, child_env):
    typed = v1.pipelines(typed=True)["int_sums"]
    before = CheckpointLog(spark, typed.layout(fixture_copy)).latest().checkpoint_id
    env = dict(child_env, LAKESTREAM_WAREHOUSE=fixture_copy, LAKESTREAM_CRASH_AT=crash_at)
    done = subprocess.run([sys.executable, "-m", "tests.state.fixtures.json_state_v1", "convert"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr[-3000:]
    committed = crash_at.startswith("after")
    latest = CheckpointLog(spark, typed.layout(fixture_copy)).latest()
    assert latest.checkpoint_id == before + committed
    if not committed:  # the text state is in force: the text pipeline reads it
        assert state_of(spark, v1.pipelines()["int_sums"], fixture_copy) == {1: 4, 2: 6, 3: 5}

    sp.migrate(spark, typed, warehouse=fixture_copy)  # again, here: done, or found done
    assert state_of(spark, typed, fixture_copy) == {1: 4, 2: 6, 3: 5}
    typed.publish(spark, v1.NEXT, fixture_copy)
    typed.run_once(spark, fixture_copy)
    assert state_of(spark, typed, fixture_copy) == {1: 14, 2: 6, 3: 25}
