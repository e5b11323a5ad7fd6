"""The example pipelines on a real Spark standalone cluster (a master and two workers on
loopback), chosen by configuration alone, write exactly what local mode writes."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from assets import SparkResource, WarehouseResource
from tests.cluster.examples_child import run_examples
from tests.cluster.standalone import standalone_cluster

CHILD = Path(__file__).with_name("examples_child.py")
# Columns that record when or by which run something happened, not what was computed.
VOLATILE = {"_batches": ["planned_at"]}
VOLATILE_CHECKPOINT_FIELDS = ("created_at", "run_id")


def delta_tables(warehouse: Path) -> list[str]:
    return sorted(str(log.parent.relative_to(warehouse)) for log in warehouse.rglob("_delta_log"))


def contents(spark, warehouse: Path, table: str) -> pd.DataFrame:
    frame = spark.read.format("delta").load(str(warehouse / table)).toPandas()
    frame = frame.drop(columns=VOLATILE.get(Path(table).name, []))
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


def test_examples_on_a_standalone_cluster_match_local_mode(spark, tmp_path, child_env):
    local, remote = tmp_path / "local", tmp_path / "cluster"
    run_examples(spark, str(local), {"spark": SparkResource(master="local[2]"),
                                     "warehouse": WarehouseResource(path=str(local))})

    with standalone_cluster(tmp_path / "spark", workers=2) as cluster:
        env = dict(child_env, LAKESTREAM_DEPLOYMENT="cluster", LAKESTREAM_SPARK_MASTER=cluster.master_url,
                   LAKESTREAM_WAREHOUSE=str(remote), LAKESTREAM_SHUFFLE_PARTITIONS="4")
        child = subprocess.run([sys.executable, str(CHILD)], env=env, capture_output=True,
                               text=True, timeout=900)
        assert child.returncode == 0, child.stderr[-4000:]
        ran_on = json.loads(child.stdout.strip().splitlines()[-1])
        apps = cluster.state()["completedapps"]

    assert ran_on == {"master": cluster.master_url, "executors": 2}
    assert [app["name"] for app in apps] == ["lakestream"]
    names = delta_tables(local)
    assert names == delta_tables(remote)
    assert {"running_sum/sums", "running_sum_unkeyed/sums", "movie_tickets_sold/movie_tickets_sold",
            "movie_tickets_sold/movie_tickets_sold_changelog", "page_minutes/page_minutes",
            "page_minutes/_state"} <= set(names)
    for table in names:
        expected, actual = contents(spark, local, table), contents(spark, remote, table)
        assert len(expected) > 0 or table.endswith("_dead_letters"), table
        pd.testing.assert_frame_equal(actual, expected, obj=table)
    sums = contents(spark, remote, "running_sum_unkeyed/sums")
    assert sorted(int(v) for v in sums["total"]) == [1, 3, 6, 7, 9, 12, 16]
