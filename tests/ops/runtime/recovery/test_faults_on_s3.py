"""An S3 warehouse whose store fails: the endpoint down before a run and in the middle of a
batch, throttling (503 SlowDown), wrong credentials, a table deleted under a run. A run that cannot reach the
store stops with an error naming bucket and path (never the credentials), commits nothing of
the batch in flight, and the next run recovers to what a run without faults leaves (the
oracle)."""

import subprocess
import sys
import time

import boto3
import pytest

from state import CheckpointLog
from tests.conftest import ROOT
from tests.objectstore.faulty_proxy import FaultyProxy
from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome, publish_all


@pytest.fixture
def proxy(s3):
    proxy = FaultyProxy(s3.endpoint)
    yield proxy
    proxy.down()


@pytest.fixture
def through_proxy(child_env, s3_warehouse, proxy):
    """A child's environment: the plain crash pipeline on the S3 warehouse, through the proxy."""
    return dict(child_env, LAKESTREAM_WAREHOUSE=s3_warehouse, AWS_ENDPOINT_URL=proxy.endpoint,
                CRASH_TEST_PIPELINE="plain", PYTHONPATH=str(ROOT))


def _run(env, **popen):
    return subprocess.Popen([sys.executable, "-m", cp.__name__], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _assert_failed_on_the_store(child, s3, timeout=300):
    out, err = child.communicate(timeout=timeout)
    assert child.returncode == 1, out + err[-3000:]
    assert "StorageError" in err and "bucket 'lake'" in err, err[-3000:]
    assert s3.env()["AWS_SECRET_ACCESS_KEY"] not in out + err


@pytest.mark.slow
def test_endpoint_down_before_a_run_fails_then_the_next_run_recovers(
        spark, s3, s3_warehouse, proxy, through_proxy, plain_oracle):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    proxy.down()

    _assert_failed_on_the_store(_run(through_proxy), s3)

    assert not CheckpointLog(spark, pipeline.layout(s3_warehouse)).latest()  # nothing committed
    pipeline.run_once(spark, s3_warehouse)
    assert outcome(spark, pipeline, s3_warehouse) == plain_oracle


@pytest.mark.slow
def test_endpoint_down_mid_batch_commits_nothing_of_it_then_the_next_run_recovers(
        spark, s3, s3_warehouse, proxy, through_proxy, plain_oracle, tmp_path):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    child = _run(dict(through_proxy, CRASH_TEST_HOLD_AT=f"3:{tmp_path}"))
    deadline = time.monotonic() + 240
    while not (tmp_path / "reached").exists() and time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()[1][-3000:]
        time.sleep(0.2)
    proxy.down()  # batch 3's operator has run; its sink write and checkpoint have not
    (tmp_path / "go").touch()

    _assert_failed_on_the_store(child, s3)

    stopped = outcome(spark, pipeline, s3_warehouse)
    # batch 2's checkpoint commits while batch 3 runs, so the endpoint may have gone before it;
    # nothing of batch 3 is anywhere either way
    assert stopped["batch"] in (1, 2)
    assert {row[3] for row in stopped["sink"]} <= {1, 2}
    pipeline.run_once(spark, s3_warehouse)
    assert outcome(spark, pipeline, s3_warehouse) == plain_oracle


@pytest.mark.slow
def test_throttling_is_retried_and_the_run_matches_the_oracle(
        spark, s3_warehouse, proxy, through_proxy, plain_oracle):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    proxy.throttle(every=5)

    done = subprocess.run([sys.executable, "-m", cp.__name__], env=through_proxy,
                          capture_output=True, text=True, timeout=600)

    assert done.returncode == 0, done.stderr[-3000:]
    assert proxy.throttled >= 5, proxy.requests  # the store said 503, and was asked again
    assert outcome(spark, pipeline, s3_warehouse) == plain_oracle


@pytest.mark.slow
def test_a_sink_table_deleted_under_a_run_stops_it_and_the_next_run_starts_the_table_afresh(
        spark, s3, s3_warehouse, child_env, plain_oracle, tmp_path):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    env = dict(child_env, LAKESTREAM_WAREHOUSE=s3_warehouse, CRASH_TEST_PIPELINE="plain",
               PYTHONPATH=str(ROOT), CRASH_TEST_HOLD_AT=f"3:{tmp_path}")
    child = _run(env)
    deadline = time.monotonic() + 240
    while not (tmp_path / "reached").exists() and time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()[1][-3000:]
        time.sleep(0.2)
    sink = pipeline.layout(s3_warehouse).table("out")
    bucket, prefix = sink[len("s3a://"):].split("/", 1)
    client = boto3.client("s3", endpoint_url=s3.endpoint)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in listed]})
    (tmp_path / "go").touch()  # batch 3 has run its operator; its sink write comes next

    out, err = child.communicate(timeout=300)
    assert child.returncode == 1, out + err[-3000:]
    assert "the table is gone" in err and sink in err, err[-3000:]

    assert CheckpointLog(spark, pipeline.layout(s3_warehouse)).latest().batch_id == 2
    pipeline.run_once(spark, s3_warehouse)  # a new sink table, from batch 3 on, exactly once
    after = outcome(spark, pipeline, s3_warehouse)
    assert after["state"] == plain_oracle["state"] and after["batch"] == plain_oracle["batch"]
    assert after["sink"] == [row for row in plain_oracle["sink"] if row[3] >= 3]


@pytest.mark.slow
def test_wrong_credentials_fail_naming_the_bucket_without_the_secret_then_the_right_ones_recover(
        spark, s3, s3_warehouse, proxy, through_proxy, plain_oracle):
    pipeline = cp.build_plain()
    publish_all(spark, pipeline, s3_warehouse)
    proxy.require_key(s3.env()["AWS_ACCESS_KEY_ID"])
    wrong = dict(through_proxy, AWS_ACCESS_KEY_ID="AKIAWRONGKEY0000", AWS_SECRET_ACCESS_KEY="wrong/s3cr3t")

    child = _run(wrong)
    out, err = child.communicate(timeout=300)

    assert child.returncode == 1, out + err[-3000:]
    assert "StorageError" in err and "bucket 'lake'" in err and "InvalidAccessKeyId" in err, err[-3000:]
    assert "wrong/s3cr3t" not in out + err and proxy.refused > 0
    assert not CheckpointLog(spark, pipeline.layout(s3_warehouse)).latest()  # nothing committed
    pipeline.run_once(spark, s3_warehouse)
    assert outcome(spark, pipeline, s3_warehouse) == plain_oracle
