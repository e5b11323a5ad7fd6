"""Workload 7: lakestream beside the other Python stateful stream processors users weigh, PyFlink
and Bytewax, and Spark Structured Streaming, side by side in one run on the same generated input,
every output checked against a pandas oracle.

    .venv/bin/python bench/peers.py                        # both workloads, full size (~25 min)
    .venv/bin/python bench/peers.py --scale 0.1 --no-flink-datastream

The peers run in virtual envs of their own (``bench/install_peers``), as child processes
reading the same batches as Parquet files (``peer_io``): ``flink_peer.py`` and
``bytewax_peer.py``. lakestream and Spark read them as one Delta commit per batch.

**Keyed running sum** (N batches of B events over K keys; one output row per event):
- lakestream vectorized (one pandas call per batch), per key on DataFrames (one call per key per
  batch, KX semantics) and per key on NumPy arrays (``data="arrays"``);
- Spark: ``applyInPandasWithState`` with RocksDB state (``running_sum.run_anchor``);
- PyFlink: DataStream ``KeyedProcessFunction`` with ``ValueState`` (a Python call per event) and
  Flink SQL ``SUM(x) OVER (PARTITION BY k ORDER BY …)`` (the JVM's own);
- Bytewax: ``stateful_map`` (a Python call per event) with SQLite recovery.

**Tumbling 1-minute window count and sum per key**, 10 s of grace: lakestream's
``window(sp.tumbling(...)).agg(emit="final")``, Spark's ``window()`` with a watermark (RocksDB),
Flink SQL's ``TUMBLE`` with a watermark, Bytewax's ``fold_window`` with an event clock.

Checks: every running sum's ``(k, total)`` pairs must be the oracle's (x ≥ 1, so a key's totals
rise strictly and the pairs pin each event's sum in input order); every window emitted must
hold the oracle's count and sum. Reported per system: events/s over the wall time from start to
drained (each system's own checkpointing included; a peer's process and mini-cluster start are
not, see ``startup_s``), the median and p99 per-batch latency (micro-batch systems: a batch from
its start until its output is written; per-event systems: sampled events from source to sink),
peak RSS of the system's process tree, and the versions.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))      # run from anywhere

from collections import defaultdict  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _common import peak_memory, per_batch, phase_times, print_table, write_results  # noqa: E402
from peer_io import RUNNING_SUM_COLUMNS, WINDOW_COLUMNS, parse_result, read_output, write_input  # noqa: E402

import ops as sp  # noqa: E402
from ops.operators.basic import Map  # noqa: E402
from ops.operators.windows import WindowAggregate  # noqa: E402
from ops.runtime.planning import Planner  # noqa: E402  (planning, timed by phase)
from ops.sinks.delta import DeltaSink  # noqa: E402
from ops.sources.delta import DeltaTableSource  # noqa: E402
from state import CheckpointLog, StateStore  # noqa: E402

BENCH = Path(__file__).resolve().parent
PEER_VENVS = BENCH.parent / ".venv-peers"
#: lakestream's steps timed per batch: phase -> (class, method). The sink and checkpoint commits
#: run in writer threads beside the next batch (write-behind), so phases add up to more than a
#: batch's wall time.
PHASES = {"plan (and its commit)": (Planner, "plan_next"), "read": (DeltaTableSource, "read"),
          "operator: map": (Map, "apply"), "operator: window": (WindowAggregate, "apply"),
          "state encode (thread)": (StateStore, "encode_changes"),
          "sink commit (thread)": (DeltaSink, "write"),
          "checkpoint commit (thread)": (CheckpointLog, "commit")}
#: PyFlink's Python functions run in the JVM's embedded interpreter: 2.5-3x its process mode here
FLINK_THREAD_MODE = ("--execution-mode", "thread")
PEER_TIMEOUT_S = 1800  # a peer that has not drained by then fails the workload, it never hangs it
SPARK = "Spark applyInPandasWithState + RocksDB"
SPARK_WINDOW = "Spark window() + watermark + RocksDB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply keys and sizes by this")
    parser.add_argument("--no-flink-datastream", action="store_true",
                        help="skip PyFlink's per-event DataStream job (the slowest system)")
    parser.add_argument("--keys", default=",".join(map(str, GRID)),
                        help=f"running-sum key counts, of {sorted(GRID)}")
    args = parser.parse_args()
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2,
                                            extra={"spark.driver.memory": "2g"}))
    workdir = tempfile.mkdtemp(prefix="lakestream-peers-")
    try:
        results = run_all(spark, workdir, args.scale, not args.no_flink_datastream,
                          tuple(int(k) for k in args.keys.split(",")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nresults: {write_results('peers', results)}")


GRID = {10_000: (100_000, 4), 100_000: (1_000_000, 3)}  # running sum: keys -> (batch, batches)


def run_all(spark, workdir: str, scale: float, flink_datastream: bool = True,
            key_counts: tuple[int, ...] = tuple(GRID)) -> dict:
    """Both workloads at the suite's sizes times ``scale`` (the running sum for ``keys`` of
    :data:`GRID`, for each of ``key_counts``); rows and the versions used."""
    import running_sum
    n = lambda size: max(100, int(size * scale))  # noqa: E731
    running_sum.warm_up(spark, workdir)
    sums = []
    for keys in key_counts:
        batch, batches = GRID[keys]
        sums += running_sums(spark, workdir, n(keys), n(batch), batches, flink_datastream)
        print_rows(f"keyed running sum, {n(keys):,} keys, {batches} batches of {n(batch):,}",
                   [r for r in sums if r["keys"] == n(keys)])
    windows = windowed(spark, workdir, n(10_000), n(500_000), 5)
    print_rows("tumbling 1-minute count/sum per key, 10 s grace", windows)
    return {"running_sum": sums, "windowed": windows, "versions": versions(spark)}


# --- the keyed running sum ----------------------------------------------------------------------
def running_sums(spark, workdir: str, keys: int, batch: int, batches: int,
                 flink_datastream: bool = True) -> list[dict]:
    """Every system on one input of ``batches`` batches of ``batch`` events over ``keys`` keys."""
    from running_sum import events, run_anchor, run_lakestream, summing, write_batches
    tag = f"sum_{keys}_{batch}"
    frames = list(events(keys, [batch] * batches))
    source, files = f"{workdir}/{tag}_delta", f"{workdir}/{tag}_files"
    total = write_batches(spark, source, frames)
    write_input(frames, files)
    expected = oracle_sums(frames)
    runs: dict[str, dict] = {}
    for system, vectorized, data in (("lakestream vectorized", True, "frame"),
                                     ("lakestream per-key, arrays", False, "arrays"),
                                     ("lakestream per-key, DataFrames", False, "frame")):
        warehouse = f"{workdir}/{tag}_{data}_{vectorized}"
        run = timed_phases(run_lakestream, spark, source, warehouse, vectorized, data)
        run["output"] = summing(source, vectorized, data).read_sink(spark, "out", warehouse)
        runs[system] = run
    anchor = run_anchor(spark, source, f"{workdir}/{tag}_spark")
    anchor["output"] = spark.read.format("delta").load(f"{workdir}/{tag}_spark/out").toPandas()
    runs[SPARK] = anchor
    peers = [("PyFlink SQL OVER", "flink", "running_sum_sql", ()),
             *([("PyFlink DataStream", "flink", "running_sum_datastream", FLINK_THREAD_MODE)]
               if flink_datastream else []),
             ("Bytewax stateful_map", "bytewax", "running_sum", ())]
    for system, peer, workload, options in peers:
        runs[system] = run_peer(peer, workload, files, f"{workdir}/{tag}_{peer}_{workload}", options)
    def checked(run: dict) -> tuple[bool, dict]:
        got = run["output"] if isinstance(run["output"], pd.DataFrame) else read_output(run["output"])
        return same_sums(got, expected), {}

    return with_ratios(rows_of(runs, keys, batch, batches, total, checked))


def timed_phases(run, *args) -> dict:
    """``run(*args)``'s result with the seconds per batch of each of lakestream's :data:`PHASES`."""
    times: dict[str, list[float]] = defaultdict(list)
    with phase_times(times, PHASES):
        result = run(*args)
    result["phases"] = per_batch(times, len(result["batch_latencies"]), PHASES)
    return result


def oracle_sums(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Each event's running sum of ``x`` per key, in input order."""
    events = pd.concat(frames, ignore_index=True)
    return events.assign(total=events.groupby("k")["x"].cumsum())[list(RUNNING_SUM_COLUMNS)]


def same_sums(got: pd.DataFrame, expected: pd.DataFrame) -> bool:
    """The output's ``(k, total)`` pairs are the oracle's, one per event."""
    pairs = lambda frame: np.sort(frame["k"].to_numpy(np.int64) * 2**32  # noqa: E731
                                  + frame["total"].to_numpy(np.int64))
    return len(got) == len(expected) and bool((pairs(got) == pairs(expected)).all())


# --- the tumbling window ------------------------------------------------------------------------
def windowed(spark, workdir: str, keys: int, batch: int, batches: int) -> list[dict]:
    """Every system once on the same clicks (lakestream and Spark after an untimed warm-up run
    on the same input, as ``windowed.py`` does)."""
    import windowed as w
    from running_sum import write_batches
    frames = list(w.clicks(keys, batch, batches))
    source, files = f"{workdir}/clicks_delta", f"{workdir}/clicks_files"
    total = write_batches(spark, source, frames)
    write_input(frames, files)
    expected = oracle_windows(frames)
    w.warm_up(spark, source, workdir)
    runs = {"lakestream": timed_phases(w.run_lakestream, spark, source, f"{workdir}/win_ours"),
            SPARK_WINDOW: w.run_anchor(spark, source, f"{workdir}/win_spark"),
            "PyFlink SQL TUMBLE": run_peer("flink", "window_sql", files, f"{workdir}/win_flink"),
            "Bytewax fold_window": run_peer("bytewax", "window", files, f"{workdir}/win_bytewax")}
    def checked(run: dict) -> tuple[bool, dict]:
        got = run["windows"] if "windows" in run else read_output(run["output"], WINDOW_COLUMNS)
        agreeing, emitted = same_windows(got, expected)
        return agreeing == emitted, {"windows_out": emitted, "windows_agreeing": agreeing}

    return with_ratios(rows_of(runs, keys, batch, batches, total, checked), spark_system=SPARK_WINDOW)


def oracle_windows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    clicks = pd.concat(frames, ignore_index=True)
    ms = pd.to_datetime(clicks["ts"], utc=True).astype("int64") // 1_000_000
    return (clicks.assign(window_start=ms // 60_000 * 60_000)
            .groupby(["k", "window_start"]).agg(n=("x", "size"), total=("x", "sum")).reset_index())


def same_windows(got: pd.DataFrame, expected: pd.DataFrame) -> tuple[int, int]:
    """How many of the windows emitted hold the oracle's count and sum, and how many were
    emitted."""
    got = got.assign(window_start=_epoch_ms(got["window_start"]))
    both = got.merge(expected, on=["k", "window_start"], suffixes=("", "_oracle"))
    agreeing = int(((both["n"] == both["n_oracle"]) & (both["total"] == both["total_oracle"])).sum())
    return agreeing, len(got)


def _epoch_ms(values: pd.Series) -> pd.Series:
    if pd.api.types.is_integer_dtype(values):
        return values.astype("int64")
    return pd.to_datetime(values, utc=True).astype("int64") // 1_000_000


# --- the peers' processes -----------------------------------------------------------------------
def run_peer(peer: str, workload: str, files: str, workdir: str, options: tuple[str, ...] = ()) -> dict:
    """Run ``<peer>_peer.py`` in its own venv on ``files``; its result line, wall seconds, peak
    RSS of its process tree, and where its output is. ``error`` when it is not installed or
    failed (the other systems still run)."""
    python = PEER_VENVS / peer / "bin" / "python"
    if not python.exists():
        return {"error": f"not installed: run bench/install_peers ({python} is missing)"}
    output = f"{workdir}/out"
    command = [str(python), str(BENCH / f"{peer}_peer.py"), "--workload", workload,
               "--input", files, "--output", output, "--work", f"{workdir}/work", *options]
    os.makedirs(workdir, exist_ok=True)
    print(f"    {peer} {workload} ...", flush=True)
    with open(f"{workdir}/log.txt", "w") as log:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        measured: dict = {}
        started = time.perf_counter()
        with peak_memory(measured, pid=child.pid):
            try:
                stdout, _ = child.communicate(timeout=PEER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()
                return {"error": f"did not finish within {PEER_TIMEOUT_S} s"}
    if child.returncode != 0:
        return {"error": f"exit {child.returncode}; see {workdir}/log.txt: "
                         f"{Path(workdir, 'log.txt').read_text()[-300:]}"}
    result = parse_result(stdout)
    return {**result, "process_seconds": time.perf_counter() - started,
            "peak_rss_mb": measured["peak_rss_mb"], "output": output}


# --- rows ---------------------------------------------------------------------------------------
def rows_of(runs: dict[str, dict], keys: int, batch: int, batches: int, total: int,
            checked) -> list[dict]:
    """A row per system: its error, or its figures and whether ``checked(run)`` found its
    output right (``checked`` returns that and extra columns)."""
    rows = []
    for system, run in runs.items():
        if "error" in run:
            rows.append({"keys": keys, "batch": batch, "batches": batches, "system": system,
                         "error": run["error"]})
            continue
        correct, extra = checked(run)
        rows.append(row(keys, batch, batches, system, total, run, correct, **extra))
    return rows


def row(keys: int, batch: int, batches: int, system: str, total: int, run: dict, correct: bool,
        **extra) -> dict:
    """One table row: throughput, latency, memory and whether the output was the oracle's."""
    events = run.get("events", total)
    latencies = run.get("batch_latencies")
    if latencies:
        median, p99 = statistics.median(latencies), float(np.percentile(latencies, 99))
    else:
        median, p99 = run.get("latency_p50_s"), run.get("latency_p99_s")
    return {"keys": keys, "batch": batch, "batches": batches, "system": system,
            "events": events, "seconds": run["seconds"], "events_per_s": total / run["seconds"],
            "median_latency_s": median, "p99_latency_s": p99,
            "latency_of": "batch" if latencies else "event, sampled" if median is not None else "",
            "startup_s": run.get("startup_seconds"), "peak_rss_mb": run.get("peak_rss_mb"),
            "output_correct": correct and events == total, "config": run.get("config"),
            "phases_per_batch_s": run.get("phases"),
            **extra}


def with_ratios(rows: list[dict], spark_system: str = SPARK) -> list[dict]:
    """Each row's speed against Spark, PyFlink's fastest Python-state job and Bytewax."""
    rates = {r["system"]: r["events_per_s"] for r in rows if "events_per_s" in r}
    anchors = {"x_spark": rates.get(spark_system),
               "x_pyflink_datastream": rates.get("PyFlink DataStream"),
               "x_pyflink_sql": rates.get("PyFlink SQL OVER", rates.get("PyFlink SQL TUMBLE")),
               "x_bytewax": rates.get("Bytewax stateful_map", rates.get("Bytewax fold_window"))}
    for r in rows:
        for name, rate in anchors.items():
            if rate and "events_per_s" in r:
                r[name] = r["events_per_s"] / rate
    return rows


COLUMNS = ["system", "events_per_s", "x_spark", "x_pyflink_datastream", "x_pyflink_sql", "x_bytewax",
           "median_latency_s", "p99_latency_s", "latency_of", "peak_rss_mb", "output_correct"]


def print_rows(title: str, rows: list[dict]) -> None:
    print_table(title, COLUMNS + ["error"], [[r.get(c, "") if r.get(c) is not None else ""
                                             for c in COLUMNS + ["error"]] for r in rows])
    for r in rows:
        if r.get("phases_per_batch_s"):
            print(f"  {r['system']}, seconds per batch: " + ", ".join(
                f"{phase} {seconds:.3f}" for phase, seconds in r["phases_per_batch_s"].items()))
    sys.stdout.flush()


def versions(spark) -> dict:
    """What ran: the Python, Spark, Delta and Java versions here, and the peers' own."""
    import importlib.metadata as metadata
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    found = {"python": platform.python_version(), "pyspark": metadata.version("pyspark"),
             "delta-spark": metadata.version("delta-spark"), "java": java[0] if java else "?"}
    for peer, package in (("flink", "apache-flink"), ("bytewax", "bytewax")):
        python = PEER_VENVS / peer / "bin" / "python"
        if python.exists():
            found[package] = subprocess.run(
                [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                capture_output=True, text=True).stdout.strip()
    return found


if __name__ == "__main__":
    main()

