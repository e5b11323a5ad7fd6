"""A warehouse on S3 against one on the local disk, side by side in one run. Never part of CI.

Starts the local S3 server (``ops.devservers.s3_server``, moto) before Spark, then:

1. **Running sum** (vectorized, ``--keys`` keys, ``--batches`` × ``--batch`` events, one commit
   per batch): the source table and the warehouse on the local disk; both on S3 with delta-rs
   doing the pipeline's own appends and log reads; both on S3 with Spark doing them
   (``LAKESTREAM_OBJECT_STORE_IO=spark``, lakestream before delta-rs).
2. **Continuous mode latency**: publish ``--records`` records every ``--every`` s; time until
   the rows are readable in the Delta sink (read through delta-rs, the same reader for both
   stores), on the local disk and on S3.

    .venv/bin/python bench/s3.py [--keys 100000 --batch 1000000 --batches 3 --rounds 30]
    .venv/bin/python bench/s3.py --only latency [--rounds 30]   # part 2 alone

The S3 server is moto, a Python process on the same two cores: its figures are a floor for a
real store's request latency, not a model of S3's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from _common import headline, per_batch, phase_times, print_table, write_results

from ops.devservers.s3_server import LocalS3

BUCKET = "bench"


def phases() -> dict:
    """lakestream's steps timed per batch: phase -> (class, method). The sink and checkpoint
    commits run in writer threads beside the next batch, so phases add up to more than a
    batch's wall time."""
    from ops.operators.basic import Map
    from ops.runtime.planning import Planner
    from ops.sinks.delta import DeltaSink
    from ops.sources.delta import DeltaTableSource
    from state import CheckpointLog, StateStore
    from state.run.store import OperatorState

    return {"plan (and its commit)": (Planner, "plan_next"), "read": (DeltaTableSource, "read"),
            "operator": (Map, "apply"), "  state read": (OperatorState, "prefetch"),
            "state encode (thread)": (StateStore, "encode_changes"),
            "sink commit (thread)": (DeltaSink, "write"),
            "checkpoint commit (thread)": (CheckpointLog, "commit")}


def throughput(spark, args, root: str, io: str) -> dict:
    """The running sum with its source and warehouse under ``root``, the pipeline's own Delta
    I/O on object stores done by ``io`` (``delta-rs`` or ``spark``)."""
    from running_sum import events, run_lakestream, write_batches

    from state import delta_io

    os.environ[delta_io.IO_SETTING] = io
    timed: dict = defaultdict(list)
    try:
        source = f"{root}/events"
        total = write_batches(spark, source, events(args.keys, [args.batch] * args.batches))
        with phase_times(timed, phases()):
            run = run_lakestream(spark, source, f"{root}/wh", vectorized=True)
    finally:
        os.environ.pop(delta_io.IO_SETTING, None)
    assert run["events"] == total, (run["events"], total)
    return {"events_per_s": total / run["seconds"], "seconds": run["seconds"],
            "median_batch_s": statistics.median(run["batch_latencies"]),
            "per_batch_s": per_batch(timed, args.batches, phases())}


def latency(spark, args, warehouse: str) -> dict:
    """Continuous mode: publish -> readable in the sink, p50 and p99 (ms)."""
    from latency import pipeline

    import ops as sp
    from analytics.delta_files import DeltaFiles

    job = pipeline()
    job.publish(spark, [{"k": 0, "round": -1, "x": 0.0}], warehouse)
    job.run_once(spark, warehouse)  # creates the sink, state and plans tables
    published: dict[int, float] = {}
    readable: dict[int, float] = {}
    deadline = time.monotonic() + args.rounds * args.every + 120
    stop = sp.StopSignal()

    def watch() -> None:
        sink = DeltaFiles(job.layout(warehouse).table("out"))
        sink.snapshot()
        while len(readable) < args.rounds and time.monotonic() < deadline:
            found = sink.commits()
            if found is None:
                time.sleep(0.005)
                continue
            now = time.time()
            for value in found.inserted["round"]:
                readable.setdefault(int(value), now)

    def publish() -> None:
        time.sleep(1.0)
        for n in range(args.rounds):
            started = time.time()
            job.publish(spark, [{"k": i % 10, "round": n, "x": 1.0} for i in range(args.records)],
                        warehouse)
            published[n] = started
            while n < args.warmup and n not in readable and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(max(0.0, args.every - (time.time() - started)))

    threads = [threading.Thread(target=watch), threading.Thread(target=publish)]
    for thread in threads:
        thread.start()

    def until_read(report) -> None:
        if len(readable) >= args.rounds or time.monotonic() > deadline:
            stop.set("every round read")

    job.run_continuously(spark, warehouse, trigger=args.trigger, stop=stop, checkpointed=until_read,
                         max_seconds=deadline - time.monotonic())
    for thread in threads:
        thread.join()
    ends = [readable[n] - published[n] for n in sorted(published) if n >= args.warmup and n in readable]
    return {"p50_ms": statistics.median(ends) * 1000,
            "p99_ms": statistics.quantiles(ends, n=100)[98] * 1000, "n": len(ends)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--trigger", default="100ms")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--only", choices=["sum", "latency"], default=None,
                        help="run one part (the running sum, or continuous mode's latency)")
    args = parser.parse_args()

    local = tempfile.mkdtemp(prefix="lakestream-s3-bench-")
    with LocalS3.start(Path(local) / "s3") as server:
        server.create_bucket(BUCKET)
        os.environ.update(server.env())
        import ops as sp

        # 3 GiB of heap, as the tests have: the source tables are written through Spark from
        # pandas, and at 1M rows a batch the default 1 GiB once ran out
        spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2,
                                                extra={"spark.driver.memory": "3g"}))
        s3 = f"s3a://{BUCKET}/run-{int(time.time())}"
        throughput(spark, argparse.Namespace(**{**vars(args), "batch": 10_000, "batches": 2}),
                   f"{local}/warm", "delta-rs")  # the JIT warm, the jars loaded
        sums = {} if args.only == "latency" else {
            "local disk": throughput(spark, args, f"{local}/sum", "delta-rs"),
            "S3, delta-rs": throughput(spark, args, f"{s3}/sum_rs", "delta-rs"),
            "S3, Spark only": throughput(spark, args, f"{s3}/sum_spark", "spark")}
        lat = {} if args.only == "sum" else {
            "local disk": latency(spark, args, f"{local}/latency"),
            "S3, delta-rs": latency(spark, args, f"{s3}/latency")}
        spark.stop()

    if sums:
        base = sums["local disk"]["events_per_s"]
        print_table(f"running sum, vectorized, {args.keys} keys, {args.batches} x {args.batch} events",
                    ["where", "events/s", "x local disk", "median batch s"],
                    [[name, f"{r['events_per_s']:,.0f}", f"{r['events_per_s'] / base:.2f}",
                      f"{r['median_batch_s']:.2f}"] for name, r in sums.items()])
        names = list(phases())
        print_table("seconds per batch, by phase", ["phase", *sums],
                    [[name, *(f"{r['per_batch_s'].get(name, 0):.2f}" for r in sums.values())]
                     for name in names])
        print(f"delta-rs vs Spark only on S3: "
              f"{sums['S3, delta-rs']['events_per_s'] / sums['S3, Spark only']['events_per_s']:.2f}x")
    if lat:
        print_table(f"continuous mode, publish -> readable, {args.records} records every {args.every} s",
                    ["where", "p50 ms", "p99 ms", "n"],
                    [[name, f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}", r["n"]] for name, r in lat.items()])
    write_results("s3", {"args": vars(args), "running_sum": sums, "latency": lat})
    for name, r in lat.items():
        headline(f"s3 latency {args.rounds} rounds, {name}",
                 f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms")


if __name__ == "__main__":
    main()
