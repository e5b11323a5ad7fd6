"""A changed pipeline on a warehouse with real checkpoints: refused when it would misread or
leave state behind, migrated explicitly (rename, drop, re-key, transform), undone by a reset,
and a migration killed at each step leaves the checkpoint before it in force."""

import dataclasses
import signal
import subprocess
import sys

import pandas as pd
import pytest

import ops as sp
from state import CheckpointLog, MigrationError, PipelineChangedError, read_state
from state.offline import StateEdit, migrate_state
from tests.ops.runtime import migration_child as child
from tests.ops.runtime.migration_child import SCHEMA, running_sum, version_1, version_2
from tests.spark_settings import child_environment

FIRST = [{"x": 1, "y": 0}, {"x": 2, "y": 1}, {"x": 3, "y": 0}]  # totals: y=0 -> 4, y=1 -> 2
LATER = [{"x": 10, "y": 0}, {"x": 20, "y": 1}]


def _state(spark, pipeline, warehouse, name):
    rows = read_state(spark, pipeline.layout(warehouse), name)
    return dict(zip(rows["key"], rows["value"]))


def _latest(spark, pipeline, warehouse):
    return CheckpointLog(spark, pipeline.layout(warehouse)).latest()


@pytest.fixture
def checkpointed(spark, warehouse):
    """Version 1 of the pipeline, run once over FIRST: one checkpoint holding its state."""
    pipeline = version_1()
    pipeline.publish(spark, FIRST, warehouse)
    pipeline.run_once(spark, warehouse)
    return pipeline


def test_a_renamed_or_rekeyed_operator_stops_the_run_before_it_reads_anything(
        spark, warehouse, checkpointed):
    before = _latest(spark, checkpointed, warehouse)
    assert before.operators["sum"]["keys"] == ["y"] and before.operators["sum"]["shape"] == {
        "value": "int"}
    renamed = (sp.read.from_callback("publish", key="y", schema=SCHEMA)
               .map(running_sum, state=0, name="sum2").write.to_delta("out")).named("changing")
    renamed.publish(spark, LATER, warehouse)
    with pytest.raises(PipelineChangedError) as refused:
        renamed.run_once(spark, warehouse)
    assert "'sum'" in str(refused.value) and "new now: 'sum2'" in str(refused.value)
    assert "rename={'sum'" in str(refused.value) and "allow_dropped_state" in str(refused.value)
    with pytest.raises(PipelineChangedError, match=r"was keyed by \(y\), now keyed by \(x\)"):
        version_1(key="x").run_once(spark, warehouse)
    assert _latest(spark, checkpointed, warehouse) == before  # nothing ran
    assert len(checkpointed.read_sink(spark, "out", warehouse)) == len(FIRST)
    # the pipeline as it was still runs on, from where it was
    checkpointed.run_once(spark, warehouse)
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 14, 1: 22}


def test_harmless_changes_pass_and_are_recorded(spark, warehouse, checkpointed):
    widened = (sp.read.from_callback("publish", key="y", schema=SCHEMA)
               .filter(lambda data: data["x"] > 0, name="positive")
               .map(running_sum, state=0, name="sum", ttl="1h")
               .map(lambda data: data.assign(total=data["total"] * 1), name="same")
               .write.to_delta("out")).named("changing")
    widened.publish(spark, LATER, warehouse)
    widened.run_once(spark, warehouse)
    latest = _latest(spark, checkpointed, warehouse)
    assert set(latest.operators) == {"sum", "sum__timers", "sum__expiry"}
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 14, 1: 22}


def test_rename_and_transform_then_reset_undoes_it(spark, warehouse, checkpointed):
    migrated_pipeline = version_2()
    with pytest.raises(MigrationError, match=r"values were int, now float.*transform=\{'total'"):
        sp.migrate(spark, migrated_pipeline, rename={"sum": "total"}, warehouse=warehouse)
    before = _latest(spark, checkpointed, warehouse)
    report = sp.migrate(spark, migrated_pipeline, rename={"sum": "total"},
                        transform={"total": float}, warehouse=warehouse)
    assert (report.checkpoint_id, report.epoch) == (before.checkpoint_id + 1, before.epoch + 1)
    assert report.written == {"total": 2} and report.deleted == {"sum": 2}
    assert _state(spark, checkpointed, warehouse, "total") == {0: 4.0, 1: 2.0}
    assert _state(spark, checkpointed, warehouse, "sum") == {}
    # repeated unnamed, with a function: it runs again, and finds nothing left to rename
    with pytest.raises(MigrationError, match=r"rename 'sum': the checkpoint holds no state"):
        sp.migrate(spark, migrated_pipeline, rename={"sum": "total"},
                   transform={"total": float}, warehouse=warehouse)
    migrated_pipeline.publish(spark, LATER, warehouse)
    migrated_pipeline.run_once(spark, warehouse)
    totals = migrated_pipeline.read_sink(spark, "out", warehouse)["total"].tolist()
    assert totals[len(FIRST):] == [14.0, 22.0]  # continued from the migrated state
    # back to before the migration, with the pipeline as it was: its state is there again
    sp.reset_to_checkpoint(spark, checkpointed, before.checkpoint_id, warehouse)
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 4, 1: 2}
    assert _state(spark, checkpointed, warehouse, "total") == {}
    checkpointed.run_once(spark, warehouse)
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 14, 1: 22}
    assert checkpointed.read_sink(spark, "out", warehouse)["total"].tolist() == [1, 2, 4, 14, 22]


def test_rekey_then_run_distributed(spark, warehouse, checkpointed):
    """State moves to new keys, and so to other key groups: executors find it there."""
    rekeyed = version_1(key="x", mode="distributed")
    with pytest.raises(MigrationError, match=r"give rekey=\{'sum'"):
        sp.migrate(spark, rekeyed, warehouse=warehouse)
    sp.migrate(spark, rekeyed, rekey={"sum": lambda y: 100 + y}, warehouse=warehouse)
    assert _state(spark, checkpointed, warehouse, "sum") == {100: 4, 101: 2}
    rekeyed.publish(spark, [{"x": 100, "y": 7}, {"x": 101, "y": 7}], warehouse)
    rekeyed.run_once(spark, warehouse)
    assert _state(spark, checkpointed, warehouse, "sum") == {100: 104, 101: 103}


def test_a_failed_migration_writes_nothing(spark, warehouse, checkpointed):
    before = _latest(spark, checkpointed, warehouse)
    pipeline = version_2()
    with pytest.raises(MigrationError, match=r"key 1: the transform function failed on 2"):
        sp.migrate(spark, pipeline, rename={"sum": "total"},
                   transform={"total": lambda v: float(v) if v != 2 else 1 / 0}, warehouse=warehouse)
    with pytest.raises(MigrationError, match=r"cannot be encoded with the json codec"):
        sp.migrate(spark, pipeline, rename={"sum": "total"},
                   transform={"total": lambda v: object()}, warehouse=warehouse)
    with pytest.raises(MigrationError, match=r"keys 0 and 1 both become 5"):
        sp.migrate(spark, version_1(key="x"), rekey={"sum": lambda y: 5}, warehouse=warehouse)
    with pytest.raises(MigrationError, match=r"rename 'nope'"):
        sp.migrate(spark, pipeline, rename={"nope": "total"}, warehouse=warehouse)
    assert _latest(spark, checkpointed, warehouse) == before
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 4, 1: 2}


def test_allow_dropped_state_drops_it_and_a_successor_starts_empty(spark, warehouse, checkpointed):
    stateless = (sp.read.from_callback("publish", key="y", schema=SCHEMA)
                 .map(lambda data: data.assign(total=0), name="plain")
                 .write.to_delta("out")).named("changing")
    with pytest.raises(PipelineChangedError):
        stateless.run_once(spark, warehouse)
    stateless.publish(spark, LATER, warehouse)
    stateless.run_once(spark, warehouse, allow_dropped_state=True)
    assert _state(spark, checkpointed, warehouse, "sum") == {}
    assert "allow_dropped_state" in _latest_migration(spark, checkpointed, warehouse)
    # the operator brought back under its old name starts empty, not from what it left: also
    # on executors, which read its key groups' files (tombstones included) themselves
    checkpointed.publish(spark, [{"x": 5, "y": 0}], warehouse)
    checkpointed.run_once(spark, warehouse, mode="distributed")
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 5}


def _latest_migration(spark, pipeline, warehouse):
    layout = pipeline.layout(warehouse)
    log = CheckpointLog(spark, layout)
    labels = [log.get(i).migration for i in range(1, log.latest().checkpoint_id + 1)]
    return " ".join(label for label in labels if label)


def test_a_checkpoint_from_before_meanings_were_recorded(spark, warehouse):
    """An earlier release's checkpoint records no meaning: runs pass (and record it), and a
    rename migrates it with the successor's description."""
    checkpointed = version_1(state_type="json")  # an earlier release stored text
    checkpointed.publish(spark, FIRST, warehouse)
    checkpointed.run_once(spark, warehouse)
    layout = checkpointed.layout(warehouse)
    latest = _latest(spark, checkpointed, warehouse)
    old = dataclasses.replace(latest, checkpoint_id=latest.checkpoint_id + 1, operators=None)
    CheckpointLog(spark, layout).commit(old, pd.DataFrame())
    sp.migrate(spark, version_2(), rename={"sum": "total"}, transform={"total": float},
               warehouse=warehouse)
    assert _state(spark, checkpointed, warehouse, "total") == {0: 4.0, 1: 2.0}
    version_2().publish(spark, LATER, warehouse)
    version_2().run_once(spark, warehouse)
    assert _latest(spark, checkpointed, warehouse).operators["total"]["shape"] == {
        "value": "float"}


def test_edits_move_onto_a_name_only_when_it_is_free(spark, warehouse, checkpointed):
    layout = checkpointed.layout(warehouse)

    def edit(*edits):
        return migrate_state(spark, layout, edits, operators={}, tracked={}, label="test",
                             run_id="test")

    with pytest.raises(MigrationError, match=r"'sum' and 'other' would both move to 'x'"):
        edit(StateEdit("sum", "x"), StateEdit("other", "x"))
    edit(StateEdit("sum", "copy", value=lambda v: v * 10))
    assert _state(spark, checkpointed, warehouse, "copy") == {0: 40, 1: 20}
    checkpointed.publish(spark, LATER, warehouse)
    checkpointed.run_once(spark, warehouse)  # 'sum' is new to the recorded meaning: it starts
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 10, 1: 20}
    with pytest.raises(MigrationError, match=r"'sum' already holds 2 key"):
        edit(StateEdit("copy", "sum"))
    edit(StateEdit("copy", "sum"), StateEdit("sum", None))  # dropped by the same migration
    assert _state(spark, checkpointed, warehouse, "sum") == {0: 40, 1: 20}
    assert _state(spark, checkpointed, warehouse, "copy") == {}


MIGRATION_STEPS = ["migration_rows_built:1", "after_checkpoint_commit:1"]


@pytest.mark.parametrize("crash_at", MIGRATION_STEPS)
def test_a_migration_killed_midway_leaves_one_checkpoint_in_force(
        spark, warehouse, child_env, checkpointed, crash_at):
    before = _latest(spark, checkpointed, warehouse)
    done = subprocess.run([sys.executable, "-m", "tests.ops.runtime.migration_child"],
                          env=dict(child_env, LAKESTREAM_CRASH_AT=crash_at),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    latest = _latest(spark, checkpointed, warehouse)
    committed = crash_at.startswith("after")
    assert latest.checkpoint_id == before.checkpoint_id + committed
    if not committed:  # the previous checkpoint: the old pipeline runs, the new is refused
        assert _state(spark, checkpointed, warehouse, "sum") == {0: 4, 1: 2}
        with pytest.raises(PipelineChangedError):
            version_2().run_once(spark, warehouse)
    child.migrate_to_version_2(spark, warehouse)  # again, in this process: done, or found done
    assert _state(spark, checkpointed, warehouse, "total") == {0: 4.0, 1: 2.0}
    assert _state(spark, checkpointed, warehouse, "sum") == {}
    version_2().publish(spark, LATER, warehouse)
    version_2().run_once(spark, warehouse)
    assert _state(spark, checkpointed, warehouse, "total") == {0: 14.0, 1: 22.0}


def test_a_migration_killed_on_s3_then_run_again_and_reset(spark, s3_warehouse):
    """On S3: a migration killed before its commit leaves the checkpoint before it in force; run
    again, it is done once; a reset to before it brings the old state back."""
    pipeline = version_1()
    pipeline.publish(spark, FIRST, s3_warehouse)
    pipeline.run_once(spark, s3_warehouse)
    before = _latest(spark, pipeline, s3_warehouse)
    done = subprocess.run([sys.executable, "-m", "tests.ops.runtime.migration_child"],
                          env=dict(child_environment(s3_warehouse),
                                   LAKESTREAM_CRASH_AT="migration_rows_built:1"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert _latest(spark, pipeline, s3_warehouse).checkpoint_id == before.checkpoint_id
    child.migrate_to_version_2(spark, s3_warehouse)
    assert _state(spark, pipeline, s3_warehouse, "total") == {0: 4.0, 1: 2.0}
    version_2().publish(spark, LATER, s3_warehouse)
    version_2().run_once(spark, s3_warehouse)
    assert _state(spark, pipeline, s3_warehouse, "total") == {0: 14.0, 1: 22.0}
    sp.reset_to_checkpoint(spark, pipeline, before.checkpoint_id, s3_warehouse)
    assert _state(spark, pipeline, s3_warehouse, "sum") == {0: 4, 1: 2}
    assert _state(spark, pipeline, s3_warehouse, "total") == {}
