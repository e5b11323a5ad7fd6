"""A Spark ``StatefulProcessor`` on lakestream against Spark's own ``transformWithStateInPandas``.

The processor (issue 66's bench): per key a running count in a ``ValueState`` and the last 10
``x`` in a ``ListState`` (appended, then cut back with ``put``), one row out per key and batch.
The same class runs in both, on the same input: ``--batches`` Delta commits of ``--events``
events over ``--keys`` keys, read one commit per batch. Side by side in one run:

- ``lakestream driver``: ``group_by("k").transformWithStateInPandas(...)``, one run draining
  every batch (each key's variables held from the batch before, in the same run);
- ``lakestream distributed``: the same on executors (``local[2]``);
- ``spark``: Structured Streaming, ``availableNow``, ``maxFilesPerTrigger=1``, RocksDB state
  store, into a Delta sink: the anchor.

Both sides are warmed up first on a small input. Output rows are checked equal in number.

    .venv/bin/python bench/tws.py                                # 1M events over 100k keys, 3 batches
    .venv/bin/python bench/tws.py --events 100000 --keys 10000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
from _common import headline, peak_memory, print_table, write_results  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402
from running_sum import drain_pipeline, events, write_batches  # noqa: E402

import ops as sp  # noqa: E402

OUTPUT = "k long, count long, last string"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class CountAndLastTen(StatefulProcessor):
    """A key's row count, and its last ten ``x``."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n long")
        self.recent = handle.getListState("recent", "x long")

    def handleInputRows(self, key, rows, timerValues):
        frame = pd.concat(list(rows), ignore_index=True)
        count = (self.count.get()[0] if self.count.exists() else 0) + len(frame)
        self.count.update((count,))
        self.recent.appendList([(int(x),) for x in frame["x"].tolist()[-10:]])
        kept = list(self.recent.get())[-10:]
        self.recent.put(kept)
        yield pd.DataFrame({"k": [key[0]], "count": [count],
                            "last": [",".join(str(x) for (x,) in kept)]})

    def close(self):
        pass


def run_lakestream(spark, source: str, warehouse: str, mode: str) -> dict:
    pipeline = (sp.read.from_delta(source, key="k", max_versions=1).group_by("k")
                .transformWithStateInPandas(CountAndLastTen(), OUTPUT)
                .write.to_delta("out")).named(f"tws_{mode}").with_mode(mode)
    result = drain_pipeline(spark, pipeline, warehouse)
    result["rows_out"] = len(pipeline.read_sink(spark, "out", warehouse))
    return result


def run_spark(spark, source: str, workdir: str) -> dict:
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    stream = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
              .groupBy("k").transformWithStateInPandas(CountAndLastTen(), OUTPUT, "Append", "None"))
    result: dict = {}
    with peak_memory(result, spark):
        started = time.perf_counter()
        query = (stream.writeStream.format("delta").outputMode("append")
                 .option("checkpointLocation", f"{workdir}/checkpoint")
                 .trigger(availableNow=True).start(f"{workdir}/out"))
        query.awaitTermination()
        result["seconds"] = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    result["events"] = sum(p["numInputRows"] for p in progress)
    result["batch_latencies"] = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    result["rows_out"] = spark.read.format("delta").load(f"{workdir}/out").count()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--modes", default="driver,distributed")
    args = parser.parse_args()
    spark = sp.spark_session()
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    work = Path(tempfile.mkdtemp(prefix="bench_tws_"))
    warm = str(work / "warm_events")
    write_batches(spark, warm, events(100, [1_000, 1_000]))
    for mode in args.modes.split(","):
        run_lakestream(spark, warm, str(work / f"warm_{mode}"), mode)
    run_spark(spark, warm, str(work / "warm_spark"))

    source = str(work / "events")
    total = write_batches(spark, source, events(args.keys, [args.events] * args.batches))
    runs = {f"lakestream {mode}": run_lakestream(spark, source, str(work / mode), mode)
            for mode in args.modes.split(",")}
    runs["spark transformWithStateInPandas + RocksDB"] = run_spark(spark, source, str(work / "spark"))
    anchor = total / runs["spark transformWithStateInPandas + RocksDB"]["seconds"]
    rows_out = {run["rows_out"] for run in runs.values()}
    assert len(rows_out) == 1, {name: run["rows_out"] for name, run in runs.items()}
    table = []
    for name, run in runs.items():
        assert run["events"] == total, (name, run["events"], total)
        rate = total / run["seconds"]
        table.append([name, rate, rate / anchor, run["seconds"],
                      statistics.median(run["batch_latencies"]), run["peak_rss_mb"]])
    print_table(f"CountAndLastTen, {args.events:,} events x {args.batches} batches over "
                f"{args.keys:,} keys ({rows_out.pop():,} rows out each)",
                ["system", "events_per_s", "x spark", "seconds", "median_batch_s", "peak_rss_mb"],
                table)
    write_results("tws", {"events": args.events, "keys": args.keys, "batches": args.batches,
                          "rows": table})
    headline("tws", ", ".join(f"{row[0]} {row[2]:.2f}x spark" for row in table))


if __name__ == "__main__":
    main()
