"""Workload 1, the keyed running sum (the KX example at scale), and workload 3, checkpoint cost.

Running sum: lakestream in vectorized and per-key mode against Spark Structured Streaming's
``applyInPandasWithState`` with the RocksDB state store, on the same Delta input (one commit per
micro-batch on both sides), for every (keys, batch size) asked for. Checkpoint cost: one batch
changing 10k keys of a state already holding 100k / 1M / 5M keys.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd
from _common import drain_query, peak_memory
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.types import LongType, StructField, StructType

import ops as sp
from state import CHECKPOINT_OPERATOR, DEFAULT_KEY_GROUPS, Checkpoint, key_group_column
from state.contract.schema import STATE_TABLE_PROPERTIES
from state.lake import tables

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUT_SCHEMA = StructType([StructField(n, LongType()) for n in ("k", "x", "total")])
STATE_SCHEMA = StructType([StructField("total", LongType())])


def write_batches(spark, path: str, frames) -> int:
    """One Delta commit (one file) per frame, change data feed on; returns the rows written."""
    rows = 0
    for n, frame in enumerate(frames):
        writer = spark.createDataFrame(frame).coalesce(1).write.format("delta").mode("append")
        if n == 0:
            writer = writer.option("delta.enableChangeDataFeed", "true")
        writer.save(path)
        rows += len(frame)
    return rows


def events(keys: int, sizes: list[int], seed: int = 42):
    """Frames of ``k`` (uniform over ``keys``), ``x`` in 1..99 and ``seq``, which numbers every
    event of all the frames once, in input order."""
    rng = np.random.default_rng(seed)
    first = 0
    for size in sizes:
        yield pd.DataFrame({"k": rng.integers(0, keys, size, dtype=np.int64),
                            "x": rng.integers(1, 100, size, dtype=np.int64),
                            "seq": np.arange(first, first + size, dtype=np.int64)})
        first += size


def vectorized_sum(op, md, data):
    previous = sp.get(op, md)
    running = data.groupby("k", sort=False)["x"].cumsum() + data["k"].map(previous)
    sp.set(op, md, running.groupby(data["k"]).last())
    return data.assign(total=running)


def per_key_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def per_key_arrays_sum(op, md, data):
    """:func:`per_key_sum` on the key's rows as NumPy arrays (``map(..., data="arrays")``)."""
    total = sp.get(op, md) + np.cumsum(data["x"])
    sp.set(op, md, int(total[-1]))
    return {**data, "total": total}


def drain_pipeline(spark, pipeline: sp.Pipeline, warehouse: str) -> dict:
    """Run ``pipeline`` until its source is drained: wall seconds, input rows, per-batch
    latencies (from a batch's start until its output is written; the checkpoint after it
    commits while the next batch runs), peak memory."""
    result: dict = {}
    with peak_memory(result, spark):
        started = time.perf_counter()
        report = pipeline.run_once(spark, warehouse)
        result["seconds"] = time.perf_counter() - started
    result["events"] = report.rows_in
    result["batch_latencies"] = [b.seconds for b in report.batches]
    result["checkpoint_seconds"] = list(report.checkpoint_seconds)
    return result


def summing(source: str, vectorized: bool, data: str = "frame") -> sp.Pipeline:
    """The running sum over the Delta table ``source``, one commit per batch, into sink ``out``:
    vectorized, or per key on DataFrames or (``data="arrays"``) on NumPy arrays."""
    fn = vectorized_sum if vectorized else per_key_arrays_sum if data == "arrays" else per_key_sum
    name = "vectorized" if vectorized else f"per_key_{data}"
    # the table's own order is seq's (one file per commit, written in order): no sort needed
    return (sp.read.from_delta(source, key="k", max_versions=1)
            .map(fn, state=0, vectorized=vectorized, data=data, name="sum")
            .write.to_delta("out")).named(name)


def run_lakestream(spark, source: str, warehouse: str, vectorized: bool, data: str = "frame") -> dict:
    return drain_pipeline(spark, summing(source, vectorized, data), warehouse)


def anchor_sum(timeout_ms: int | None = None):
    """The anchor's function for ``applyInPandasWithState``: a key's running sum over its
    frames, the total kept in the group's state. With ``timeout_ms``, every call sets a
    processing-time timeout that far ahead."""

    def running_sum(key, frames, group_state):
        total = group_state.get[0] if group_state.exists else 0
        for frame in frames:
            running = frame["x"].cumsum() + total
            total = int(running.iloc[-1])
            yield pd.DataFrame({"k": frame["k"], "x": frame["x"], "total": running})
        group_state.update((total,))
        if timeout_ms is not None:
            group_state.setTimeoutDuration(timeout_ms)

    return running_sum


def anchor_running_sum(spark, stream, timeout_ms: int | None = None):
    """``stream`` (columns ``k`` and ``x``) through ``groupBy("k").applyInPandasWithState`` of
    :func:`anchor_sum`, with the RocksDB state store. Spark runs batches with no data while a
    query holds timeouts, so an ``availableNow`` drain would never end (880 empty batches before
    it was stopped): with ``timeout_ms`` they are turned off."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    if timeout_ms is not None:
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    timeout = (GroupStateTimeout.NoTimeout if timeout_ms is None
               else GroupStateTimeout.ProcessingTimeTimeout)
    return stream.groupBy("k").applyInPandasWithState(anchor_sum(timeout_ms), OUT_SCHEMA, STATE_SCHEMA,
                                                      "append", timeout)


def run_anchor(spark, source: str, workdir: str, timeout_ms: int | None = None) -> dict:
    """Spark Structured Streaming: same source, one commit per trigger, RocksDB state (see
    :func:`anchor_running_sum` for ``timeout_ms``)."""
    stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
    return drain_query(spark, anchor_running_sum(spark, stream, timeout_ms), workdir)


def warm_up(spark, workdir: str) -> None:
    """Run both systems once on a tiny input, so neither is timed on a cold JVM (Delta's commit
    path runs several times faster once the JIT has compiled it)."""
    source = f"{workdir}/warm_events"
    write_batches(spark, source, events(1_000, [10_000, 1_000, 1_000]))
    run_lakestream(spark, source, f"{workdir}/warm_wh", vectorized=True)
    run_anchor(spark, source, f"{workdir}/warm_anchor")


def throughput(spark, workdir: str, keys: int, batch: int, batches: int, per_key: bool) -> list[dict]:
    """Every system on one input of ``batches`` commits of ``batch`` events over ``keys`` keys."""
    tag = f"{keys}k_{batch}b"
    source = f"{workdir}/events_{tag}"
    total = write_batches(spark, source, events(keys, [batch] * batches))
    runs = {"lakestream vectorized": run_lakestream(spark, source, f"{workdir}/wh_{tag}", True)}
    if per_key:
        runs["lakestream per-key"] = run_lakestream(spark, source, f"{workdir}/wh_{tag}", False)
    runs["anchor: applyInPandasWithState + RocksDB"] = run_anchor(spark, source, f"{workdir}/anchor_{tag}")
    anchor_rate = total / runs["anchor: applyInPandasWithState + RocksDB"]["seconds"]
    rows = []
    for system, run in runs.items():
        assert run["events"] == total, (system, run["events"], total)
        rate = total / run["seconds"]
        rows.append({"keys": keys, "batch": batch, "batches": batches, "system": system,
                     "events_per_s": rate, "median_batch_s": statistics.median(run["batch_latencies"]),
                     "x_anchor": rate / anchor_rate, "seconds": run["seconds"],
                     "peak_rss_mb": run["peak_rss_mb"], "peak_jvm_heap_mb": run["peak_jvm_heap_mb"]})
    return rows


def seed_state(spark, warehouse: str, name: str, keys: int) -> None:
    """State of operator ``sum`` already holding ``keys`` keys, written directly as checkpoint 1
    (creating the table as a pipeline's first checkpoint does)."""
    layout = sp.Pipeline(stream=None, sinks=(), name=name).layout(warehouse)
    state_rows = spark.range(keys).select(
        F.lit("sum").alias("operator"), F.col("id").cast("string").alias("key"),
        F.lit("0").alias("value"), F.lit(False).alias("deleted"),
        F.lit(1).cast("long").alias("checkpoint_id"),
        key_group_column(F.col("id").cast("string"), DEFAULT_KEY_GROUPS).alias("key_group"))
    record = Checkpoint(checkpoint_id=1, batch_id=0, offsets={}, run_id="seed").to_json()
    rows = state_rows.unionByName(spark.createDataFrame(
        [(CHECKPOINT_OPERATOR, "", record, False, 1, None)], state_rows.schema))
    tables.append(rows, layout.state, partition_by=("operator",), properties=STATE_TABLE_PROPERTIES)


def changed_keys(spark, path: str, state_keys: int, changed: int) -> None:
    """One commit of ``changed`` distinct keys drawn from the ``state_keys`` already in state."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"k": rng.choice(state_keys, changed, replace=False).astype(np.int64),
                          "x": np.ones(changed, dtype=np.int64), "seq": np.arange(changed)})
    write_batches(spark, path, [frame])


def summing_pipeline(source: str, name: str) -> sp.Pipeline:
    return (sp.read.from_delta(source, key="k", order_by=("seq",))
            .map(vectorized_sum, state=0, vectorized=True, name="sum")
            .write.to_delta("out")).named(name)


def checkpoint_cost(spark, workdir: str, state_keys: int, changed: int) -> dict:
    """Time of the batch and of its checkpoint, changing ``changed`` of ``state_keys`` keys."""
    source, warehouse, name = f"{workdir}/changes_{state_keys}", f"{workdir}/ckpt_{state_keys}", "state"
    changed_keys(spark, source, state_keys, changed)
    seed_state(spark, warehouse, name, state_keys)
    result: dict = {"state_keys": state_keys, "changed_keys": changed}
    with peak_memory(result, spark):
        report = summing_pipeline(source, name).run_once(spark, warehouse)
    assert report.rows_in == changed
    result.update(checkpoint_s=report.checkpoint_seconds[0], batch_s=report.batches[0].seconds)
    return result
