"""A cluster that shares only the object store: the examples in distributed mode on a standalone
cluster whose worker runs in a mount namespace of its own, where the driver's folder is an
empty tmpfs, with the warehouse on S3. Executors read and write S3 only: anything of the
driver's disk they needed would be missing, and the run would fail."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dagster_project.pipelines import running_sum_keyed, running_sum_unkeyed
from tests.cluster.standalone import standalone_cluster
from tests.helpers import sink_column

CHILD = Path(__file__).with_name("examples_child.py")


def _hiding(folder: Path) -> tuple[str, ...]:
    """A command prefix that runs its command in a new mount namespace where ``folder`` is an
    empty tmpfs (``mount`` needs root; so does ``unshare --mount``)."""
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs tmpfs "{folder}" && exec "$@"', "sh")


@pytest.mark.slow
def test_examples_distributed_on_a_cluster_that_shares_only_s3(spark, s3_warehouse, tmp_path,
                                                                child_env):
    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            [*_hiding(tmp_path), "true"], capture_output=True).returncode != 0:
        pytest.skip("hiding the driver's folder from the worker needs root, unshare and mount")
    driver_folder = tmp_path / "driver"
    driver_folder.mkdir()
    (driver_folder / "probe").write_text("the driver's disk")
    worker_root = Path(tempfile.mkdtemp(prefix="lakestream-worker-"))  # outside the hidden one
    try:
        with standalone_cluster(worker_root, workers=1,
                                worker_wrapper=_hiding(tmp_path)) as cluster:
            env = dict(child_env, LAKESTREAM_DEPLOYMENT="cluster", LAKESTREAM_MODE="distributed",
                       LAKESTREAM_SPARK_MASTER=cluster.master_url, LAKESTREAM_WAREHOUSE=s3_warehouse,
                       LAKESTREAM_SHUFFLE_PARTITIONS="2", EXAMPLES_PART="first",
                       EXAMPLES_PROBE_PATH=str(driver_folder / "probe"))
            done = subprocess.run([sys.executable, str(CHILD)], env=env, cwd=driver_folder,
                                  capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(worker_root, ignore_errors=True)

    assert done.returncode == 0, done.stderr[-4000:]
    assert "(distributed)" in done.stderr and "(driver)" not in done.stderr
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    assert ran["executors"] == 1 and ran["executor_sees_probe"] is False  # the namespace held
    assert sink_column(spark, running_sum_keyed, s3_warehouse, "total") == [1, 3, 6, 1, 3, 6, 10]
    assert sink_column(spark, running_sum_unkeyed, s3_warehouse, "total") == [1, 3, 6, 7, 9, 12, 16]
    tickets = spark.read.format("delta").load(f"{s3_warehouse}/movie_tickets_sold/movie_tickets_sold")
    assert tickets.count() == 5  # one row per title, from the state table's first batch
