"""The local S3 server (ops.devservers.s3_server) and Spark's commits to it with a conditional put
(ops/jvm/ConditionalPutLogStore.java)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_the_server_starts_and_stops_from_the_shell(tmp_path):
    command = [sys.executable, "-m", "ops.devservers.s3_server"]
    folder = ["--dir", str(tmp_path / "s3"), "--port", "0"]
    started = subprocess.run([*command, "start", *folder[:2], "--bucket", "lake"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    try:
        assert started.returncode == 0, started.stderr
        assert "export AWS_ENDPOINT_URL=http://127.0.0.1:" in started.stdout
        status = subprocess.run([*command, "status", *folder[:2]], capture_output=True, text=True,
                                cwd=ROOT)
        assert status.stdout.startswith("running at http://127.0.0.1:")
    finally:
        stopped = subprocess.run([*command, "stop", *folder[:2]], capture_output=True, text=True,
                                 cwd=ROOT)
    assert stopped.stdout.strip() == "S3 server stopped"
    assert subprocess.run([*command, "status", *folder[:2]], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip() == "not running"


def test_spark_commits_to_s3_with_a_conditional_put(spark, s3_warehouse):
    # two creations of one commit file, both opened before either is written: S3 takes the
    # first and refuses the second (412), as Delta's S3 log store here asks it to
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(f"{s3_warehouse}/raced/_delta_log/00000000000000000000.json")
    fs = path.getFileSystem(conf)
    store = jvm.io.lakestream.delta.ConditionalPutLogStore
    first, second = (fs.createFile(path).overwrite(False).must(store.CONDITIONAL, True).build()
                     for _ in range(2))
    first.write(bytearray(b"first\n"))
    first.close()
    second.write(bytearray(b"second\n"))
    with pytest.raises(Exception, match="(?i)412|precondition|RemoteFileChanged"):
        second.close()
    assert spark.conf.get("spark.delta.logStore.s3a.impl") == "io.lakestream.delta.ConditionalPutLogStore"
