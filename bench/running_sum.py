"""Keyed running sum: lakestream's vectorized state vs Spark Structured Streaming's
``applyInPandasWithState`` with the RocksDB state store, on the same input, in one run.
Then checkpoint cost for 10k changed keys with small and large state already stored.

    .venv/bin/python bench/state_bench.py                 # the issue's sizes (several minutes)
    .venv/bin/python bench/state_bench.py --scale 0.1     # a quick look

Prints a table and writes bench/results/state_bench.json. Never part of CI.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.types import LongType, StructField, StructType

import ops as sp
from state import CHECKPOINT_OPERATOR, Checkpoint, CheckpointLog, tables

from _common import jvm_peak_mb, peak_rss_mb, print_table, write_results

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUT_SCHEMA = StructType([StructField(n, LongType()) for n in ("k", "x", "total")])
STATE_SCHEMA = StructType([StructField("total", LongType())])


def make_input(spark, path: str, keys: int, big: int, small: int, batches: int) -> int:
    """Version 0: ``big`` events; versions 1..batches: ``small`` events each. One file per commit."""
    rng = np.random.default_rng(42)
    sizes = [big] + [small] * batches
    for n, size in enumerate(sizes):
        frame = pd.DataFrame({"k": rng.integers(0, keys, size, dtype=np.int64),
                              "x": rng.integers(1, 100, size, dtype=np.int64),
                              "seq": np.arange(size, dtype=np.int64)})
        writer = spark.createDataFrame(frame).coalesce(1).write.format("delta").mode("append")
        if n == 0:
            writer = writer.option("delta.enableChangeDataFeed", "true")
        writer.save(path)
    return sum(sizes)


def vectorized_sum(op, md, data):
    previous = sp.get(op, md)
    running = data.groupby("k", sort=False)["x"].cumsum() + data["k"].map(previous)
    sp.set(op, md, running.groupby(data["k"]).last())
    return data.assign(total=running)


def per_key_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def run_lakestream(spark, source: str, warehouse: str, vectorized: bool) -> dict:
    fn = vectorized_sum if vectorized else per_key_sum
    pipeline = (sp.read.from_delta(source, key="k", order_by=("seq",), max_versions=1)
                .map(fn, state=0, vectorized=vectorized, name="sum")
                .write.to_delta("out")).named("vectorized" if vectorized else "per_key")
    started = time.perf_counter()
    report = pipeline.run_once(spark, warehouse)
    total = time.perf_counter() - started
    latencies = [b.seconds + c for b, c in zip(report.batches, report.checkpoint_seconds)]
    return {"events": report.rows_in, "seconds": total, "batch_latencies": latencies}


def run_anchor(spark, source: str, workdir: str) -> dict:
    """Spark Structured Streaming: same source, one commit per trigger, RocksDB state."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)

    def running_sum(key, frames, group_state):
        total = group_state.get[0] if group_state.exists else 0
        for frame in frames:
            running = frame["x"].cumsum() + total
            total = int(running.iloc[-1])
            yield pd.DataFrame({"k": frame["k"], "x": frame["x"], "total": running})
        group_state.update((total,))

    stream = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
              .groupBy("k").applyInPandasWithState(running_sum, OUT_SCHEMA, STATE_SCHEMA, "append",
                                                   GroupStateTimeout.NoTimeout))
    started = time.perf_counter()
    query = (stream.writeStream.format("delta").outputMode("append")
             .option("checkpointLocation", f"{workdir}/anchor_checkpoint")
             .trigger(availableNow=True).start(f"{workdir}/anchor_out"))
    query.awaitTermination()
    total = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    latencies = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return {"events": sum(p["numInputRows"] for p in progress), "seconds": total,
            "batch_latencies": latencies}


def warm_up(spark, workdir: str) -> None:
    """Run both systems once on a tiny input first, so neither is timed on a cold JVM.

    Delta's commit path runs several times faster once the JIT has compiled it; whichever system
    ran first used to pay that alone.
    """
    source = f"{workdir}/warm_events"
    make_input(spark, source, keys=1_000, big=10_000, small=1_000, batches=3)
    run_lakestream(spark, source, f"{workdir}/warm_wh", vectorized=True)
    run_anchor(spark, source, f"{workdir}/warm_anchor")


def seed_state(spark, warehouse: str, name: str, keys: int) -> sp.Pipeline:
    """A pipeline whose state already holds ``keys`` keys (written directly, as one checkpoint)."""
    pipeline_layout = sp.Pipeline(stream=None, sinks=(), name=name).layout(warehouse)
    log = CheckpointLog(spark, pipeline_layout)
    log.ensure_table()
    state_rows = spark.range(keys).select(
        F.lit("sum").alias("operator"), F.col("id").cast("string").alias("key"),
        F.lit("0").alias("value"), F.lit(False).alias("deleted"),
        F.lit(1).cast("long").alias("checkpoint_id"))
    record = Checkpoint(checkpoint_id=1, batch_id=0, offsets={}, run_id="seed").to_json()
    rows = state_rows.unionByName(spark.createDataFrame(
        [(CHECKPOINT_OPERATOR, "", record, False, 1)], state_rows.schema))
    tables.append(rows, pipeline_layout.state, partition_by=("operator",))
    return pipeline_layout


def checkpoint_cost(spark, workdir: str, state_keys: int, changed: int) -> dict:
    source = f"{workdir}/changes_{state_keys}"
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"k": rng.choice(state_keys, changed, replace=False).astype(np.int64),
                          "x": np.ones(changed, dtype=np.int64), "seq": np.arange(changed)})
    (spark.createDataFrame(frame).coalesce(1).write.format("delta")
     .option("delta.enableChangeDataFeed", "true").save(source))
    warehouse = f"{workdir}/wh_{state_keys}"
    name = f"state_{state_keys}"
    seed_state(spark, warehouse, name, state_keys)
    pipeline = (sp.read.from_delta(source, key="k", order_by=("seq",))
                .map(vectorized_sum, state=0, vectorized=True, name="sum")
                .write.to_delta("out")).named(name)
    report = pipeline.run_once(spark, warehouse)
    assert report.rows_in == changed
    return {"state_keys": state_keys, "changed_keys": changed,
            "checkpoint_s": report.checkpoint_seconds[0], "batch_s": report.batches[0].seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    parser.add_argument("--per-key", action="store_true", help="also run per-key mode (slow)")
    args = parser.parse_args()
    scale = lambda n: max(1, int(n * args.scale))  # noqa: E731
    keys, big, small, batches = scale(100_000), scale(1_000_000), scale(100_000), 10

    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    workdir = tempfile.mkdtemp(prefix="lakestream-bench-")
    try:
        source = f"{workdir}/events"
        events = make_input(spark, source, keys, big, small, batches)
        warm_up(spark, workdir)
        results = {"vectorized": run_lakestream(spark, source, f"{workdir}/wh", True)}
        if args.per_key:
            results["per_key"] = run_lakestream(spark, source, f"{workdir}/wh", False)
        results["anchor"] = run_anchor(spark, source, workdir)
        for name, result in results.items():
            assert result["events"] == events, (name, result["events"], events)
        anchor_rate = events / results["anchor"]["seconds"]
        rows = [[name, r["events"], r["seconds"], r["events"] / r["seconds"],
                 statistics.median(r["batch_latencies"]), (r["events"] / r["seconds"]) / anchor_rate]
                for name, r in results.items()]
        print_table(f"keyed running sum: {events:,} events, {keys:,} keys, 1x{big:,} + "
                    f"{batches}x{small:,} (anchor: applyInPandasWithState + RocksDB)",
                    ["path", "events", "seconds", "events/s", "median batch s", "x anchor"], rows)
        costs = [checkpoint_cost(spark, workdir, n, scale(10_000))
                 for n in (scale(100_000), scale(5_000_000))]
        print_table("checkpoint cost for changed keys vs keys already in state",
                    ["state keys", "changed", "checkpoint s", "batch s"],
                    [[c["state_keys"], c["changed_keys"], c["checkpoint_s"], c["batch_s"]] for c in costs])
        ratio = costs[1]["checkpoint_s"] / costs[0]["checkpoint_s"]
        print(f"checkpoint big/small ratio: {ratio:.2f} (target <= 2)")
        print(f"peak driver RSS {peak_rss_mb():,.0f} MiB; peak JVM heap {jvm_peak_mb(spark):,.0f} MiB")
        path = write_results("state_bench", {"throughput": results, "checkpoint_cost": costs,
                                             "checkpoint_ratio": ratio, "scale": args.scale,
                                             "peak_rss_mb": peak_rss_mb(),
                                             "peak_jvm_heap_mb": jvm_peak_mb(spark)})
        print(f"results: {path}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
