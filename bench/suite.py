"""The benchmark suite: every workload, lakestream and its anchor side by side in one run on the
same generated input. Prints a table per workload and a summary against the targets, and writes
``bench/results/suite.json``. Never part of CI.

    .venv/bin/python bench/suite.py                 # the full sizes (about 25 minutes on 2 cores)
    .venv/bin/python bench/suite.py --scale 0.05    # same shapes, small: a quick look
    .venv/bin/python bench/suite.py --only windowed,checkpoint
    .venv/bin/python bench/suite.py --only kafka        # starts an embedded Kafka broker of its own
    .venv/bin/python bench/suite.py --only peers        # PyFlink and Bytewax too (bench/install_peers)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))      # run from anywhere

from _common import headline, print_table, write_results  # noqa: E402

import ops as sp  # noqa: E402

WORKLOADS = ("running_sum", "windowed", "checkpoint", "recovery", "overhead", "kafka", "peers")
TARGETS = {"running_sum": "vectorized >= 10x anchor at 100k keys", "windowed": ">= 1x anchor",
           "checkpoint": "largest/smallest state <= 2"}
#: issue 24's targets, each a ratio within the peers workload: (workload, system, ratio) -> target
PEER_TARGETS = {
    ("running_sum", "lakestream vectorized", "x_spark"): 50.0,
    ("running_sum", "lakestream vectorized", "x_pyflink_datastream"): 1.0,
    ("windowed", "lakestream", "x_spark"): 3.0,
    ("running_sum", "lakestream per-key, arrays", "x_bytewax"): 1.0,
    ("running_sum", "lakestream per-key, DataFrames", "x_bytewax"): 1.0,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply keys and sizes by this")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    parser.add_argument("--no-per-key", action="store_true", help="skip per-key mode (the slow one)")
    parser.add_argument("--peer-keys", default="10000,100000", help="peers: running-sum key counts")
    args = parser.parse_args()
    chosen = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(chosen) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s) {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    n = lambda size: max(100, int(size * args.scale))  # noqa: E731

    # 2 GiB of driver heap for both systems: the 5M-key workloads ran the default 1 GiB out once.
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2,
                                            extra={"spark.driver.memory": "2g"}))
    workdir = tempfile.mkdtemp(prefix="lakestream-bench-")
    results: dict = {"scale": args.scale, "workloads": chosen}
    started = time.perf_counter()
    try:
        import running_sum
        running_sum.warm_up(spark, workdir)
        for workload in chosen:
            print(f"\n==> {workload}", flush=True)
            results[workload] = RUNNERS[workload](spark, workdir, n, args)
            write_results("suite", results)   # a later failure keeps what was measured
        results["summary"] = summary(results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["suite_seconds"] = time.perf_counter() - started
    print(f"\nresults: {write_results('suite', results)} ({results['suite_seconds'] / 60:.1f} min)")
    for line in results.get("summary", []):
        headline(f"suite {line['workload']}, {line['system']} (scale {args.scale:g})",
                 f"{line['ratio']:.2f} (target {line['target']})")


def _running_sum(spark, workdir, n, args) -> list[dict]:
    from running_sum import throughput
    rows = []
    for keys, batch, batches in ((10_000, 100_000, 4), (10_000, 1_000_000, 3),
                                 (100_000, 100_000, 4), (100_000, 1_000_000, 3)):
        rows += throughput(spark, workdir, n(keys), n(batch), batches, per_key=not args.no_per_key)
    _table("keyed running sum (anchor: applyInPandasWithState + RocksDB)", rows,
           ["keys", "batch", "batches", "system", "events_per_s", "median_batch_s", "x_anchor",
            "peak_rss_mb", "peak_jvm_heap_mb"])
    return rows


def _windowed(spark, workdir, n, args) -> list[dict]:
    from windowed import windowed
    rows = windowed(spark, workdir, n(10_000), n(500_000), 5)
    _table("tumbling 1-minute count/sum per key, 10 s grace, emit final (anchor: window() + "
           "watermark + RocksDB)", rows,
           ["keys", "batch", "batches", "system", "runs", "events_per_s", "seconds_range",
            "median_batch_s", "x_anchor", "windows_out", "windows_agreeing", "peak_rss_mb",
            "peak_jvm_heap_mb"])
    return rows


def _checkpoint(spark, workdir, n, args) -> list[dict]:
    from running_sum import checkpoint_cost
    rows = [checkpoint_cost(spark, workdir, n(keys), n(10_000))
            for keys in (100_000, 1_000_000, 5_000_000)]
    _table("checkpoint cost: 10k changed keys vs keys already in state", rows,
           ["state_keys", "changed_keys", "checkpoint_s", "batch_s", "peak_rss_mb", "peak_jvm_heap_mb"])
    return rows


def _recovery(spark, workdir, n, args) -> dict:
    from recovery import rebuild, recovery
    crashes = [recovery(spark, workdir, n(keys), n(10_000)) for keys in (100_000, 1_000_000, 5_000_000)]
    _table("recovery after a crash before the checkpoint commit, vs state size", crashes,
           ["state_keys", "changed_keys", "recover_s", "replay_s", "peak_rss_mb", "peak_jvm_heap_mb"])
    rebuilds = [rebuild(spark, workdir, n(keys)) for keys in (100_000, 1_000_000)]
    _table("state table rebuilt from its changelog", rebuilds,
           ["keys", "changelog_rows", "rebuild_s", "peak_rss_mb", "peak_jvm_heap_mb"])
    return {"crash": crashes, "rebuild": rebuilds}


def _overhead(spark, workdir, n, args) -> list[dict]:
    from overhead import overhead
    rows = overhead(spark, workdir)
    _table("per-run overhead of a Dagster-launched run (running_sum)", rows,
           ["mode", "run", "seconds", "peak_rss_mb"])
    return rows


def _kafka(spark, workdir, n, args) -> dict:
    """The running sum from a 12-partition topic; in the suite without the Kafka-sink variant and
    with 10 latency rounds (``bench/kafka.py`` runs all of it)."""
    from kafka import kafka_workload, print_tables
    result = kafka_workload(spark, f"{workdir}/kafka", n(300_000), n(10_000), n(100_000), rounds=10,
                            per_round=100, trigger_ms=100, per_key=not args.no_per_key, kafka_sink=False)
    print_tables(result)
    sys.stdout.flush()
    return result


def _peers(spark, workdir, n, args) -> dict:
    """PyFlink and Bytewax beside lakestream and Spark (``bench/peers.py``; the peers need
    ``bench/install_peers``)."""
    from peers import run_all
    return run_all(spark, f"{workdir}/peers", args.scale,
                   key_counts=tuple(int(k) for k in args.peer_keys.split(",")))


RUNNERS = {"running_sum": _running_sum, "windowed": _windowed, "checkpoint": _checkpoint,
           "recovery": _recovery, "overhead": _overhead, "kafka": _kafka, "peers": _peers}


def summary(results: dict) -> list[dict]:
    """One line per target: the measured ratio next to what was asked."""
    lines = []
    for row in results.get("running_sum", []):
        if row["system"] != "anchor: applyInPandasWithState + RocksDB":
            lines.append({"workload": f"running sum, {row['keys']:,} keys, batches of {row['batch']:,}",
                          "system": row["system"], "ratio": row["x_anchor"],
                          "target": TARGETS["running_sum"] if "vectorized" in row["system"] else "-"})
    for row in results.get("windowed", []):
        if row["system"] == "lakestream":
            lines.append({"workload": "tumbling window", "system": row["system"],
                          "ratio": row["x_anchor"], "target": TARGETS["windowed"]})
    if results.get("checkpoint"):
        costs = results["checkpoint"]
        lines.append({"workload": "checkpoint cost", "system": "lakestream",
                      "ratio": costs[-1]["checkpoint_s"] / costs[0]["checkpoint_s"],
                      "target": TARGETS["checkpoint"]})
    if results.get("recovery"):
        crash = results["recovery"]["crash"]
        lines.append({"workload": "recovery, largest/smallest state", "system": "lakestream",
                      "ratio": crash[-1]["recover_s"] / crash[0]["recover_s"], "target": "-"})
    for row in results.get("kafka", {}).get("throughput", []):
        if row["system"].startswith("lakestream"):
            lines.append({"workload": "running sum from Kafka", "system": row["system"],
                          "ratio": row["x_anchor"], "target": "-"})
    for (workload, system, ratio), target in PEER_TARGETS.items():
        for row in results.get("peers", {}).get(workload, []):
            if row["system"] == system and row.get(ratio) is not None and (
                    workload == "windowed" or row["keys"] >= 100_000 * results["scale"]):
                lines.append({"workload": f"peers: {workload}, {row['keys']:,} keys",
                              "system": f"{system} ({ratio})", "ratio": row[ratio],
                              "target": f">= {target:g}x"})
    _table("summary (ratio: x anchor, or largest/smallest)", lines,
           ["workload", "system", "ratio", "target"])
    return lines


def _table(title: str, rows: list[dict], columns: list[str]) -> None:
    print_table(title, columns, [[row.get(c, "") for c in columns] for row in rows])
    sys.stdout.flush()


if __name__ == "__main__":
    main()
