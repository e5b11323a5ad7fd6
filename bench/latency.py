"""Continuous mode, small batches: publish -> row readable in the Delta sink. Never part of CI.

A publisher thread publishes ``--records`` records every ``--every`` seconds (``--rounds``
times, bounded); ``pipeline.run_continuously`` (trigger ``--trigger``) runs a keyed running
sum into a Delta sink; a reader thread watches the sink's ``_delta_log`` and reads each new
commit's files with pyarrow (no Spark), noting when each round's rows became readable. Prints
p50/p99 of publish -> readable (after ``--warmup`` rounds), of the publish call alone, and where
a batch's time goes.

    .venv/bin/python bench/latency.py [--rounds 40 --records 20 --every 0.5 --trigger 100ms]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
from _common import headline, print_table, write_results

import ops as sp
from state import BatchPlans, CheckpointLog

SCHEMA = {"k": "long", "round": "long", "x": "double"}


def running_sum(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, float(total.iloc[-1]))
    return data.assign(total=total)


def pipeline() -> sp.Pipeline:
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA)
             .map(running_sum, state=0.0).write.to_delta("out")).named("latency"))


class Timings:
    """Seconds spent per phase, summed over the run (the bench wraps the phases' methods)."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)

    def wrap(self, owner, name: str, phase: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase].append(time.perf_counter() - started)
        setattr(owner, name, timed)


def watch_sink(folder: Path, seen: dict[int, float], rounds: int, deadline: float) -> None:
    """Note when each round's rows first became readable in the sink (bounded by time)."""
    log, done = folder / "_delta_log", 0
    while len(seen) < rounds and time.monotonic() < deadline:
        path = log / f"{done + 1:020d}.json"
        if not path.exists():
            time.sleep(0.005)
            continue
        done += 1
        now = time.time()
        for line in path.read_text().splitlines():
            add = json.loads(line).get("add")
            if add:
                for value in pq.read_table(folder / add["path"], columns=["round"]).column(0).to_pylist():
                    seen.setdefault(int(value), now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--trigger", default="100ms")
    parser.add_argument("--warmup", type=int, default=3,
                        help="first rounds, each published once the one before is readable, "
                             "left out of the figures (the run's first batch reads the keys' state "
                             "through Spark)")
    args = parser.parse_args()
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    warehouse = tempfile.mkdtemp(prefix="lakestream-latency-")
    job = pipeline()
    job.publish(spark, [{"k": 0, "round": -1, "x": 0.0}], warehouse)  # creates the inbox
    job.run_once(spark, warehouse)  # creates the sink, state and plans tables

    timings = Timings()
    timings.wrap(BatchPlans, "record", "plan commit")
    timings.wrap(CheckpointLog, "commit", "checkpoint commit")
    for sink in job.sinks:
        timings.wrap(type(sink), "write", "sink write")
    timings.wrap(type(job.source), "read", "source read")
    timings.wrap(type(job.source), "plan", "source plan")

    published: dict[int, tuple[float, float]] = {}
    readable: dict[int, float] = {}
    deadline = time.monotonic() + args.rounds * args.every + 120
    stop = sp.StopSignal()

    def publish() -> None:
        time.sleep(1.0)  # the run is up and idle
        for n in range(args.rounds):
            started = time.time()
            job.publish(spark, [{"k": i % 10, "round": n, "x": 1.0} for i in range(args.records)],
                        warehouse)
            published[n] = (started, time.time())
            while n < args.warmup and n not in readable and time.monotonic() < deadline:
                time.sleep(0.01)  # a warm-up round is read before the next is published
            time.sleep(max(0.0, args.every - (time.time() - started)))

    sink_folder = Path(job.layout(warehouse).table("out"))
    reader = threading.Thread(target=watch_sink, args=(sink_folder, readable, args.rounds, deadline))
    publisher = threading.Thread(target=publish)
    reader.start()
    publisher.start()

    def until_read(report: sp.CheckpointReport) -> None:
        if len(readable) >= args.rounds or time.monotonic() > deadline:
            stop.set("every round read")

    report = job.run_continuously(spark, warehouse, trigger=args.trigger, stop=stop,
                                  checkpointed=until_read, max_seconds=deadline - time.monotonic())
    publisher.join()
    reader.join()

    counted = [n for n in sorted(published) if n >= args.warmup]
    ends = [readable[n] - published[n][0] for n in counted if n in readable]
    calls = [published[n][1] - published[n][0] for n in counted]
    warm = [round((readable[n] - published[n][0]) * 1000) for n in sorted(published)
            if n < args.warmup and n in readable]
    print(f"left out (warm-up rounds), ms: {warm}; slowest counted, ms: "
          f"{sorted(round(e * 1000) for e in ends)[-5:]}")
    q = statistics.quantiles
    rows = [["publish -> readable in sink", f"{statistics.median(ends) * 1000:.0f}",
             f"{q(ends, n=100)[98] * 1000:.0f}", len(ends)],
            ["publish call", f"{statistics.median(calls) * 1000:.0f}",
             f"{q(calls, n=100)[98] * 1000:.0f}", len(calls)]]
    print_table(f"continuous mode, {args.records} records per publish, trigger {args.trigger}",
                ["what", "p50 ms", "p99 ms", "n"], rows)
    phases = [[phase, len(s), f"{statistics.median(s) * 1000:.0f}", f"{max(s) * 1000:.0f}"]
              for phase, s in timings.seconds.items()]
    print_table("per call of each phase", ["phase", "calls", "median ms", "max ms"], phases)
    write_results("latency", {
        "rounds": args.rounds, "warmup": args.warmup, "records": args.records,
        "trigger": args.trigger, "warmup_ms": warm,
        "batches": report.totals.batches, "missing": len(counted) - len(ends),
        "p50_ms": statistics.median(ends) * 1000, "p99_ms": q(ends, n=100)[98] * 1000,
        "publish_p50_ms": statistics.median(calls) * 1000,
        "phases_median_ms": {p: statistics.median(s) * 1000 for p, s in timings.seconds.items()}})
    headline(f"latency {args.rounds} rounds", f"p50 {statistics.median(ends) * 1000:.0f} ms, "
                                              f"p99 {q(ends, n=100)[98] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
