"""The operations (compact, replay, vacuum) with the warehouse on S3 leave what a plain local run
leaves."""

import pytest

import ops as sp
from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome, publish_all


@pytest.mark.slow
def test_compact_reset_replay_and_vacuum_on_s3_leave_what_a_plain_run_leaves(
        spark, s3_warehouse, plain_oracle):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    pipeline.run_once(spark, s3_warehouse)
    assert outcome(spark, pipeline, s3_warehouse) == plain_oracle

    kept = sp.compact(spark, pipeline, s3_warehouse)
    assert kept == 4 + 6  # one row per key, and every checkpoint's record
    sp.replay(spark, pipeline, 3, s3_warehouse)  # batches 4-6 again, in a new epoch
    again = outcome(spark, pipeline, s3_warehouse)
    assert again["sink"] == plain_oracle["sink"] and again["state"] == plain_oracle["state"]
    assert again["batch"] == 6
    sp.vacuum(spark, pipeline, 0, s3_warehouse)  # the files replaced by compaction and the reset
    assert outcome(spark, pipeline, s3_warehouse) == again
