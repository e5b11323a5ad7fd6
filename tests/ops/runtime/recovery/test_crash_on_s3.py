"""The crash tests on an S3 warehouse (the session's local S3 server): SIGKILL a child at a
protocol step, recover in a fresh run, and compare to the oracle the same pipeline left on a
local disk. Commits there are delta-rs's (conditional puts) and Spark's (s3a), so every step
where one of them is cut short is covered; the steps are those of the local tests where a
commit is in flight or just made (three of them, for the suite's time: the local tests kill
every step)."""

import signal

import pytest

from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome, publish_all

S3_STEPS = [
    "before_checkpoint_commit:2",  # the checkpoint's rows encoded, its commit not made
    "after_checkpoint_commit:1",   # committed, not yet verified nor post-checkpoint hooks
    # killed at after_sink_write:3 first (a sink's commit made, its checkpoint not), then
    # again while recovering from that
    "hook_on_recover:1",
]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", S3_STEPS)
def test_crash_on_s3_then_recover_matches_the_local_oracle(spark, s3_warehouse, crash_child,
                                                           oracle, crash_at):
    pipeline = cp.build()
    publish_all(spark, pipeline, s3_warehouse)
    if crash_at.startswith("hook_on_recover"):
        first = crash_child("after_sink_write:3", LAKESTREAM_WAREHOUSE=s3_warehouse)
        assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    crashed = crash_child(crash_at, LAKESTREAM_WAREHOUSE=s3_warehouse)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = pipeline.run_once(spark, s3_warehouse)

    assert report.last_batch_id == 6
    assert outcome(spark, pipeline, s3_warehouse) == oracle


@pytest.mark.slow
def test_distributed_crash_on_s3_then_recover_matches_the_local_oracle(
        spark, s3_warehouse, crash_child, distributed_oracle):
    _crash_on_s3_and_recover(spark, s3_warehouse, crash_child, "distributed",
                             "before_checkpoint_commit:2", distributed_oracle, batches=2)


@pytest.mark.slow
def test_typed_state_crash_on_s3_then_recover_matches_the_local_oracle(
        spark, s3_warehouse, crash_child, vectorized_oracle):
    """Typed storage on S3: killed after the first checkpoint added the state's columns (a
    commit of its own) and before it appended its rows."""
    _crash_on_s3_and_recover(spark, s3_warehouse, crash_child, "typed", "state_columns_added:1",
                             vectorized_oracle, batches=6)


@pytest.mark.slow
def test_typed_state_on_executors_crash_on_s3_then_recover_matches_the_local_oracle(
        spark, s3_warehouse, crash_child, distributed_oracle):
    """Typed state on executors on S3: killed with the second batch's typed files written and
    not committed."""
    _crash_on_s3_and_recover(spark, s3_warehouse, crash_child, "typed_distributed",
                             "before_checkpoint_commit:2", distributed_oracle, batches=2)


@pytest.mark.slow
def test_list_and_map_entries_crash_on_s3_then_recover_match_the_local_oracle(
        spark, s3_warehouse, crash_child, entries_oracle):
    """A StatefulProcessor's list and map, a row per element and entry, on S3: killed after the
    first checkpoint added their entry columns and before it appended its rows."""
    _crash_on_s3_and_recover(spark, s3_warehouse, crash_child, "processor_entries",
                             "state_columns_added:1", entries_oracle, batches=6)


def _crash_on_s3_and_recover(spark, s3_warehouse, crash_child, variant, crash_at, oracle, batches):
    """Kill a child running the ``variant`` pipeline on S3 at ``crash_at``; recover in a fresh
    run, here in-process; what it leaves must be the local oracle's."""
    pipeline = cp.BUILDERS[variant]()
    publish_all(spark, pipeline, s3_warehouse)
    crashed = crash_child(crash_at, pipeline=variant, LAKESTREAM_WAREHOUSE=s3_warehouse)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = pipeline.run_once(spark, s3_warehouse)

    assert report.last_batch_id == batches
    assert outcome(spark, pipeline, s3_warehouse) == oracle
