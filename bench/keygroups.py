"""How should ``_state`` be laid out so that a task reads only its key groups' rows?

The same state (one operator, ``--keys`` keys written by ``--commits`` checkpoint commits, every
row tagged with its key group) is laid out four ways, side by side on one machine:

- ``as committed``: what checkpoints write today, one file per commit, partitioned by operator;
  each file holds every key group, so statistics on ``key_group`` skip nothing;
- ``range files``: compacted into files that each hold a contiguous range of key groups
  (``repartitionByRange`` on ``key_group``), so file statistics skip the other ranges;
- ``group partitions``: partitioned by ``operator, key_group`` (a folder per group);
- ``clustered``: Delta liquid clustering on ``key_group``, then ``OPTIMIZE``.

For each layout it times reading the latest state of the groups one of ``--tasks`` tasks owns
(the read a distributed batch makes per task), counts the files that read opened, and times a
checkpoint-sized append of ``--changed`` keys (what every batch pays).

    .venv/bin/python bench/keygroups.py --keys 1000000 --commits 10 --tasks 8
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table, write_results  # noqa: E402
from pyspark.sql import DataFrame, DataFrameWriter, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import ops as sp  # noqa: E402
from state import DEFAULT_KEY_GROUPS, key_group_column  # noqa: E402

GROUPS = DEFAULT_KEY_GROUPS


def state_rows(spark: SparkSession, keys: int, commit: int, commits: int) -> DataFrame:
    """The rows checkpoint ``commit`` of ``commits`` writes: every ``commits``-th key."""
    ids = spark.range(commit, keys, commits)
    key = F.col("id").cast("string")  # an integer key's encoding is its JSON text
    return ids.select(F.lit("sum").alias("operator"), key.alias("key"),
                      F.col("id").cast("string").alias("value"), F.lit(False).alias("deleted"),
                      F.lit(commit + 1).cast("long").alias("checkpoint_id")).withColumn(
        "key_group", key_group_column(F.col("key"), GROUPS))


def appender(rows: DataFrame, layout: str) -> DataFrameWriter:
    """One file's append, partitioned as ``layout`` wants (clustered tables are not)."""
    writer = rows.coalesce(1).write.format("delta").mode("append")
    if layout == "group partitions":
        return writer.partitionBy("operator", "key_group")
    return writer if layout == "clustered" else writer.partitionBy("operator")


def build(spark: SparkSession, path: str, layout: str, keys: int, commits: int) -> None:
    if layout == "clustered":
        spark.sql(f"CREATE TABLE delta.`{path}` (operator STRING, key STRING, value STRING, "
                  "deleted BOOLEAN, checkpoint_id BIGINT, key_group INT) USING delta "
                  "CLUSTER BY (key_group)")
    for commit in range(commits):
        writer = appender(state_rows(spark, keys, commit, commits), layout)
        stats = "checkpoint_id" if layout == "group partitions" else "checkpoint_id,key_group"
        writer.option("delta.dataSkippingStatsColumns", stats).save(path)
    if layout == "range files":
        every = spark.read.format("delta").load(path)
        (every.repartitionByRange(32, "key_group").sortWithinPartitions("key_group")
         .write.format("delta").mode("overwrite").partitionBy("operator").save(path))
    if layout == "clustered":
        spark.sql(f"OPTIMIZE delta.`{path}`")


def read_task_groups(spark: SparkSession, path: str, task: int, tasks: int) -> tuple[float, int, int]:
    """Seconds, files opened and keys read for the latest state of task ``task``'s groups."""
    per_task = GROUPS // tasks
    wanted = (F.col("key_group") >= task * per_task) & (F.col("key_group") < (task + 1) * per_task)
    started = time.perf_counter()
    rows = (spark.read.format("delta").load(path).where((F.col("operator") == "sum") & wanted)
            .withColumn("file", F.input_file_name()))
    counted = rows.agg(F.countDistinct("file").alias("files"), F.countDistinct("key").alias("keys"))
    result = counted.collect()[0]
    return time.perf_counter() - started, int(result["files"]), int(result["keys"])


def append_changed(spark: SparkSession, path: str, layout: str, keys: int, changed: int) -> float:
    """Seconds to append a checkpoint of ``changed`` keys."""
    rows = state_rows(spark, keys, 0, max(1, keys // changed)).withColumn(
        "checkpoint_id", F.lit(1_000).cast("long"))
    writer = appender(rows, layout)
    started = time.perf_counter()
    writer.save(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--changed", type=int, default=10_000)
    args = parser.parse_args()
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    work = tempfile.mkdtemp(prefix="lakestream-keygroups-")
    rows, results = [], []
    for layout in ("as committed", "range files", "group partitions", "clustered"):
        path = f"{work}/{layout.replace(' ', '_')}"
        started = time.perf_counter()
        build(spark, path, layout, args.keys, args.commits)
        built = time.perf_counter() - started
        read_task_groups(spark, path, 0, args.tasks)  # warm the snapshot
        reads = [read_task_groups(spark, path, task, args.tasks) for task in range(args.tasks)]
        appends = [append_changed(spark, path, layout, args.keys, args.changed) for _ in range(3)]
        result = {"layout": layout, "build_s": built,
                  "read_s": statistics.median(r[0] for r in reads),
                  "files_per_read": statistics.median(r[1] for r in reads),
                  "keys_per_read": statistics.median(r[2] for r in reads),
                  "append_s": statistics.median(appends)}
        results.append(result)
        rows.append([layout, f"{built:.1f}", f"{result['read_s']:.2f}", result["files_per_read"],
                     result["keys_per_read"], f"{result['append_s']:.2f}"])
        shutil.rmtree(path, ignore_errors=True)
    print_table(f"_state layouts: {args.keys:,} keys in {args.commits} commits, {GROUPS} key "
                f"groups, read by {args.tasks} tasks; append of {args.changed:,} keys",
                ["layout", "build s", "read s (median task)", "files opened", "keys read",
                 "append s"], rows)
    write_results("keygroups", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
