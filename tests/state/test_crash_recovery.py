"""Crash at every protocol step (SIGKILL in a child process), recover, and compare to an oracle."""

import signal
import subprocess
import sys

import pytest

import ops as sp
from state import CheckpointLog, tables
from tests.state import crash_pipeline as cp

STEPS = [
    "after_plan:2",
    "after_sink_write:3",
    "before_global_append:4",
    "after_global_append:4",
    "hook_on_checkpoint:1",        # mid-checkpoint: markers taken, nothing committed
    "before_checkpoint_commit:2",
    "after_checkpoint_commit:1",   # committed, not yet verified nor post-checkpoint hooks
    "hook_on_post_checkpoint:2",
    "hook_on_recover:1",           # crash during recovery itself (second start)
]


def _publish_all(spark, pipeline, warehouse):
    for rows in cp.INPUT:
        pipeline.publish(spark, rows, warehouse)


def _outcome(spark, pipeline, warehouse):
    """Everything that must match the crash-free run."""
    layout = pipeline.layout(warehouse)
    last = CheckpointLog(spark, layout).latest()
    sink = tables.read(spark, layout.table("out")).orderBy("_batch_id", "_row").toPandas()
    audit = (tables.read(spark, layout.table("audit")).orderBy("idx").toPandas()
             [["idx", "k", "total"]])
    state = sp.read_state(spark, pipeline, "running_sum", warehouse=warehouse)
    tracked = {}
    cp.rows_seen.restore(last.tracked["rows_seen"])
    tracked = cp.rows_seen.value
    return {
        "sink": sink[["k", "x", "total", "_batch_id", "_row"]].values.tolist(),
        "audit": audit.values.tolist(),
        "audit_marker": last.markers["global:audit"],
        "state": sorted(zip(state["key"], state["value"])),
        "tracked": tracked,
        "batch": last.batch_id,
    }


@pytest.fixture(scope="module")
def oracle(spark, tmp_path_factory):
    warehouse = str(tmp_path_factory.mktemp("oracle"))
    pipeline = cp.build()
    _publish_all(spark, pipeline, warehouse)
    pipeline.run_once(spark, warehouse)
    return _outcome(spark, pipeline, warehouse)


def _child(env, crash_at=None):
    env = dict(env)
    if crash_at:
        env["LAKESTREAM_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "tests.state.crash_pipeline"], env=env,
                          capture_output=True, text=True, timeout=600)


def test_oracle_is_what_the_pipeline_means(oracle):
    assert oracle["batch"] == 6
    assert oracle["tracked"]["total"] == 24
    assert oracle["audit_marker"] == 23 and [row[0] for row in oracle["audit"]] == list(range(24))
    expected = {k: sum(r["x"] for batch in cp.INPUT for r in batch if r["k"] == k) for k in (0, 1, 2, 7)}
    assert dict(oracle["state"]) == expected


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", STEPS)
def test_crash_then_recover_matches_oracle(spark, warehouse, child_env, oracle, crash_at):
    pipeline = cp.build()
    _publish_all(spark, pipeline, warehouse)
    if crash_at.startswith("hook_on_recover"):
        first = _child(child_env, "after_sink_write:3")
        assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    crashed = _child(child_env, crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]

    report = pipeline.run_once(spark, warehouse)  # recovery in a fresh run, here in-process

    assert report.last_batch_id == 6
    assert _outcome(spark, pipeline, warehouse) == oracle
