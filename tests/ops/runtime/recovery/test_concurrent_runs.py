"""Two runs of the same pipeline at once: one wins, the other stops with a clear error."""

import pytest

from state import CheckpointLog
from state.lake import tables
from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome


@pytest.mark.slow
def test_two_runs_at_once_no_duplicates_no_lost_updates(spark, warehouse, child_env, oracle,
                                                        published, tmp_path, warm_children):
    pipeline = cp.build()
    published(pipeline, warehouse)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = dict(child_env, CRASH_TEST_BARRIER=str(barrier))
    children = [warm_children.start(cp.__name__, env) for _ in range(2)]
    results = [(done.returncode, done.stdout, done.stderr)
               for done in (child.wait(timeout=600) for child in children)]

    codes = sorted(code for code, _, _ in results)
    # each child's exit code and the end of its error output, whole (pytest cuts a long list)
    assert codes[0] == 0 and codes[1] != 0, "\n\n".join(
        f"exit {code}:\n{err[-4000:]}" for code, _, err in results)
    loser_err = next(err for code, _, err in results if code != 0)
    assert "CheckpointConflict" in loser_err and "another run" in loser_err, loser_err[-3000:]

    pipeline.run_once(spark, warehouse)  # a later run recovers; nothing left to do but clean up
    result = outcome(spark, pipeline, warehouse)
    audit = tables.read(spark, pipeline.layout(warehouse).table("audit"))
    # on a mismatch, whose rows the audit holds (index, run, checkpoint) and the checkpoints'
    written = sorted(tuple(row) for row in audit.select("idx", "_run", "_checkpoint").collect())
    assert result == oracle, (written, CheckpointLog(spark, pipeline.layout(warehouse)).owners(),
                              [err[-3000:] for _, _, err in results])
    assert audit.count() == audit.select("idx").distinct().count()


def test_rows_a_losing_run_left_below_the_marker_are_removed_by_the_next_run(
        spark, warehouse, oracle, published):
    """What the race above leaves when the loser's own clean-up could not run (killed, or its
    delete lost to the winner's appends): rows at the winner's indexes, tagged with a run that
    committed no checkpoint. The next run's recovery must remove exactly those."""
    pipeline = cp.build()
    published(pipeline, warehouse)
    pipeline.run_once(spark, warehouse)
    path = pipeline.layout(warehouse).table("audit")
    mine = tables.read(spark, path).toPandas()
    lost = mine[mine["_checkpoint"] == 1].assign(_run="a-run-that-lost")
    tables.append_rows(spark, lost, path)
    assert tables.read(spark, path).count() == len(mine) + len(lost)

    pipeline.run_once(spark, warehouse)

    assert outcome(spark, pipeline, warehouse) == oracle
    assert "a-run-that-lost" not in {row["_run"] for row in
                                     tables.read(spark, path).select("_run").collect()}
