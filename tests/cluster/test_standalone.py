"""The example pipelines on a real Spark standalone cluster, chosen by configuration alone, in
distributed mode (operators and state on executors), write exactly what the driver mode writes
in local mode, while the cluster grows from one worker to two between runs (rescaling)."""

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from assets import SparkResource, WarehouseResource
from tests.cluster.examples_child import run_examples
from tests.cluster.standalone import standalone_cluster

CHILD = Path(__file__).with_name("examples_child.py")
# Columns that record when or by which run something happened, not what was computed.
VOLATILE = {"_batches": ["planned_at"]}
ORDER_ONLY = "_row"  # numbers rows per mode (see docs/pages/guides/cluster.md)
VOLATILE_CHECKPOINT_FIELDS = ("created_at", "run_id")


def delta_tables(warehouse: Path) -> list[str]:
    return sorted(str(log.parent.relative_to(warehouse)) for log in warehouse.rglob("_delta_log"))


def contents(spark, warehouse: Path, table: str) -> pd.DataFrame:
    frame = spark.read.format("delta").load(str(warehouse / table)).toPandas()
    frame = frame.drop(columns=[*VOLATILE.get(Path(table).name, []), ORDER_ONLY], errors="ignore")
    if Path(table).name == "_state":
        frame["value"] = [_stable_checkpoint(v) if op == "__checkpoint__" else v
                          for op, v in zip(frame["operator"], frame["value"])]
    frame = frame.astype(str)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _stable_checkpoint(value: str) -> str:
    record = json.loads(value)
    for field in VOLATILE_CHECKPOINT_FIELDS:
        record.pop(field)
    return json.dumps(record, sort_keys=True)


def test_examples_distributed_on_a_cluster_that_grows_match_driver_mode(spark, tmp_path,
                                                                         child_env):
    local, remote = tmp_path / "local", tmp_path / "cluster"
    ran_on = []
    with standalone_cluster(tmp_path / "spark", workers=1) as cluster:
        with _examples_child(child_env, cluster, remote, tmp_path / "first") as first:
            # The child mostly waits for its executor: compute the driver-mode reference here,
            # in the test's own session, meanwhile.
            run_examples(spark, str(local),
                         {"spark": SparkResource(master="local[2]", mode="driver"),
                          "warehouse": WarehouseResource(path=str(local))})
            ran_on.append(first())
        cluster.add_workers(1)  # rescale: the same cluster grows to 2 workers between the runs
        with _examples_child(child_env, cluster, remote, tmp_path / "second") as second:
            names = delta_tables(local)
            expected = {table: contents(spark, local, table) for table in names}  # meanwhile too
            ran_on.append(second())
        apps = [app["name"] for app in cluster.state()["completedapps"]]

    assert [run["executors"] for run in ran_on] == [1, 2]
    assert apps == ["lakestream", "lakestream"]
    assert names == delta_tables(remote)
    assert {"running_sum/sums", "running_sum_unkeyed/sums", "movie_tickets_sold/movie_tickets_sold",
            "movie_tickets_sold/movie_tickets_sold_changelog", "page_minutes/page_minutes",
            "page_minutes/_state"} <= set(names)
    for table in names:
        actual = contents(spark, remote, table)
        assert len(expected[table]) > 0 or table.endswith("_dead_letters"), table
        pd.testing.assert_frame_equal(actual, expected[table], obj=table)
    sums = contents(spark, remote, "running_sum_unkeyed/sums")
    assert sorted(int(v) for v in sums["total"]) == [1, 3, 6, 7, 9, 12, 16]


@contextmanager
def _examples_child(child_env, cluster, warehouse: Path, logs: Path):
    """Start part ``logs.name`` of the examples in a child driver on ``cluster``, in distributed
    mode, two shuffle partitions per worker; yield a function that waits for it, checks it, and
    returns the JSON line it printed about the Spark it ran on. Its output goes to files: a pipe
    left unread while the test works would fill up and stall it. Killed if still running."""
    env = dict(child_env, LAKESTREAM_DEPLOYMENT="cluster",
               LAKESTREAM_SPARK_MASTER=cluster.master_url, LAKESTREAM_MODE="distributed",
               LAKESTREAM_WAREHOUSE=str(warehouse), EXAMPLES_PART=logs.name,
               LAKESTREAM_SHUFFLE_PARTITIONS=str(2 * cluster.workers))
    with open(f"{logs}.out", "w") as out, open(f"{logs}.err", "w") as err:
        child = subprocess.Popen([sys.executable, str(CHILD)], env=env, stdout=out, stderr=err)
    try:
        yield lambda: _finished(child, logs)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _finished(child: subprocess.Popen, logs: Path) -> dict:
    child.wait(timeout=900)
    stdout, stderr = (Path(f"{logs}.{kind}").read_text() for kind in ("out", "err"))
    assert child.returncode == 0, stderr[-4000:]
    assert "(distributed)" in stderr  # each batch's log line says where it ran
    assert "(driver)" not in stderr
    return json.loads(stdout.strip().splitlines()[-1])
