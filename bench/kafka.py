"""Workload 6, the keyed running sum read from Kafka: lakestream against Spark Structured
Streaming's Kafka source with ``applyInPandasWithState``, side by side in one run, on the same
12-partition topic and the same records.

An embedded broker (``ops.devservers.kafka_broker.EmbeddedKafka``, Kafka 4.1 in KRaft mode on loopback) is
started in a temporary folder and stopped by its pid at the end. Records are JSON objects
``{"k": …, "x": …}`` with record key ``k``; both systems read them ``read_committed`` from the
earliest offset and emit one row ``k, x, total`` per event.

**Throughput.** N events over K keys are produced once. lakestream reads them with
``sp.read.from_kafka(topic, key="k", max_records=B)`` (B offsets per micro-batch over all
partitions), runs the running sum vectorized (``running_sum.vectorized_sum``) and per key
(``per_key_sum``), keeps the anchor's columns, and appends to a Delta sink, checkpointing every
batch (``run_once`` until drained). The anchor: ``readStream.format("kafka")`` with
``maxOffsetsPerTrigger=B``, ``from_json`` to ``k, x``, ``groupBy("k").applyInPandasWithState``
(``running_sum.anchor_sum``) with RocksDB state, a Delta sink, ``trigger(availableNow=True)``.
Both sinks are then checked: every key's largest ``total`` must be its sum of ``x``
(*keys_agreeing*). Optionally (on by default) the same with a Kafka sink: lakestream's
exactly-once ``.write.to_kafka`` (one transaction per batch) against Spark's Kafka sink, which is
at-least-once (Spark has no transactional Kafka writer).

**Latency, produce → visible in the sink.** R rounds (after two untimed ones) each send the same
E records to two topics, one per system, and time from just before the send until the sink's
Delta log holds a commit with those rows (polled every 10 ms from the log's JSON files, without
Spark, as any reader's next snapshot would see them). The order of the two systems alternates
from round to round. What each side's number includes:

- lakestream: the send (one short-lived producer, acks=all), then one ``pipeline.run_once`` in a
  warm process (JVM and Python up, the pipeline's tables created by the warm-up rounds): the
  run's recovery (reading the checkpoint log), planning (Kafka offsets, the plan's Delta
  commit), reading, the operator and the sink's Delta commit. The checkpoint commits after the
  rows are visible and is not in the figure; it is in *run_s*. This is what a run started by a
  sensor in a warm process pays, without the sensor's own interval.
- Spark: the same send, then a long-lived query (started before the rounds) with a
  ``processingTime`` trigger of T ms: the wait for the next trigger (T/2 on average), the batch
  and its Delta commit. The query keeps polling Kafka between rounds.

Per-phase times of lakestream's batches (recovery, planning, Kafka read, operator, sink commit,
checkpoint commit) are measured by wrapping those methods for the duration of the runs; batches
overlap their writes with the next batch's reading (write-behind), so the phases add up to more
than the wall time. Spark's phases are its own progress reports' ``durationMs``.

    .venv/bin/python bench/kafka.py                                    # 5-8 min on 2 cores
    .venv/bin/python bench/kafka.py --events 60000 --batch 20000 --rounds 5 --no-per-key --no-kafka-sink
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
from _common import drain_query, per_batch, phase_times, print_table, write_results  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from running_sum import anchor_running_sum, drain_pipeline, events, per_key_sum, vectorized_sum  # noqa: E402

import ops as sp  # noqa: E402
from ops.devservers.kafka_broker import EmbeddedKafka  # noqa: E402
from ops.kafka_client import create_topic, read_topic, send_json  # noqa: E402
from ops.operators.basic import Map  # noqa: E402
from ops.runtime.planning import Planner  # noqa: E402  (recovery and planning, timed by phase)
from ops.runtime.recovery import Recovery  # noqa: E402
from ops.sinks.delta import DeltaSink  # noqa: E402
from ops.sinks.kafka import KafkaSink  # noqa: E402
from ops.sources.kafka import KafkaSource  # noqa: E402
from ops.spark.jars import KAFKA_BROKER_VERSION  # noqa: E402
from state import BatchPlans, CheckpointLog, OperatorState  # noqa: E402

PARTITIONS = 12
SCHEMA = {"k": "long", "x": "long"}
VALUE_DDL = "k long, x long"
ANCHOR = "anchor: Kafka source + applyInPandasWithState + RocksDB"
OURS_KAFKA = "lakestream vectorized, to_kafka exactly-once"
ANCHOR_KAFKA = "anchor: same, Spark's Kafka sink (at-least-once)"
VISIBLE_WITHIN_S = 120.0  # a round whose rows are not in the sink by then fails the benchmark
POLL_S = 0.01
WARM_ROUNDS = 2

#: lakestream's steps timed by phase: phase -> (class, method). Nested ones are indented.
PHASES = {
    "recover": (Recovery, "recover"),
    "plan (offsets + plan commit)": (Planner, "plan_next"),
    "  plan commit": (BatchPlans, "record"),
    "read from Kafka": (KafkaSource, "read"),
    "operator": (Map, "apply"),
    "  state read": (OperatorState, "prefetch"),
    "sink commit (Delta)": (DeltaSink, "write"),
    "sink (Kafka transaction)": (KafkaSink, "write"),
    "checkpoint commit": (CheckpointLog, "commit"),
}


# --- input --------------------------------------------------------------------------------------
def produce(bootstrap: str, topic: str, frame: pd.DataFrame) -> int:
    """``frame``'s events as JSON ``{"k", "x"}`` records keyed by ``k`` (plain ints: numpy's
    would be sent as text)."""
    records = [{"k": k, "x": x} for k, x in zip(frame["k"].tolist(), frame["x"].tolist())]
    return send_json(bootstrap, topic, records, key="k")


def new_topic(bootstrap: str, topic: str, frames: list[pd.DataFrame] = ()) -> int:
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    return sum(produce(bootstrap, topic, frame) for frame in frames)


# --- the two systems ----------------------------------------------------------------------------
def anchor_columns(data: pd.DataFrame) -> pd.DataFrame:
    """The anchor's output columns: without this the sink would also store the five Kafka
    metadata columns every row carries, a larger write than the anchor's."""
    return data[["k", "x", "total"]]


def lakestream(bootstrap: str, topic: str, name: str, batch: int | None = None,
               vectorized: bool = True, to_topic: str | None = None) -> sp.Pipeline:
    """The running sum from ``topic`` into a Delta sink ``out`` (or exactly once into ``to_topic``)."""
    stream = (sp.read.from_kafka(topic, bootstrap=bootstrap, key="k", schema=SCHEMA, max_records=batch)
              .map(vectorized_sum if vectorized else per_key_sum, state=0, vectorized=vectorized, name="sum")
              .map(anchor_columns, name="columns"))
    sinks = stream.write
    pipeline = sinks.to_kafka(to_topic, bootstrap=bootstrap, key="k") if to_topic else sinks.to_delta("out")
    return pipeline.named(name)


def anchor(spark, bootstrap: str, topic: str, batch: int | None = None):
    """Spark's Kafka source (read committed, from the earliest offset, ``batch`` offsets per
    trigger) decoded by ``from_json``, through the anchor's ``applyInPandasWithState``."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "true"))
    if batch:
        reader = reader.option("maxOffsetsPerTrigger", batch)
    values = reader.load().select(F.from_json(F.col("value").cast("string"), VALUE_DDL).alias("v"))
    return anchor_running_sum(spark, values.select("v.k", "v.x"))


def as_kafka_records(stream):
    """The anchor's rows as Kafka records: key ``k``, value the JSON of ``k, x, total`` (what
    lakestream's Kafka sink sends)."""
    return stream.select(F.col("k").cast("string").alias("key"),
                         F.to_json(F.struct("k", "x", "total")).alias("value"))


# --- throughput ---------------------------------------------------------------------------------
def throughput(spark, bootstrap: str, workdir: str, topic: str, frames: list[pd.DataFrame],
               batch: int, per_key: bool) -> tuple[list[dict], dict]:
    """Every system drains ``topic`` into Delta; rows for the table, and lakestream's phases
    per batch by system."""
    total = sum(len(f) for f in frames)
    expected = pd.concat(frames).groupby("k")["x"].sum()
    runs, phases, sinks = {}, {}, {}
    modes = {"lakestream vectorized": True, **({"lakestream per-key": False} if per_key else {})}
    for system, vectorized in modes.items():
        name = "vectorized" if vectorized else "per_key"
        pipeline = lakestream(bootstrap, topic, name, batch, vectorized)
        timed: dict[str, list[float]] = defaultdict(list)
        with phase_times(timed, PHASES):
            runs[system] = drain_pipeline(spark, pipeline, f"{workdir}/wh")
        phases[system] = per_batch(timed, len(runs[system]["batch_latencies"]), PHASES)
        sinks[system] = pipeline.table_path("out", f"{workdir}/wh")
    runs[ANCHOR] = drain_query(spark, anchor(spark, bootstrap, topic, batch), f"{workdir}/anchor")
    sinks[ANCHOR] = f"{workdir}/anchor/out"
    rows = []
    for system, run in runs.items():
        assert run["events"] == total, (system, run["events"], total)
        finals = spark.read.format("delta").load(sinks[system]).groupBy("k").agg(F.max("total").alias("t"))
        rows.append(_rate_row(system, run, total, runs[ANCHOR]["seconds"], batch,
                              keys_agreeing=_agreeing(finals.toPandas(), expected)))
    return rows, phases


def kafka_sinks(spark, bootstrap: str, workdir: str, topic: str, frames: list[pd.DataFrame],
                batch: int, tag: str = "") -> tuple[list[dict], dict]:
    """lakestream vectorized into a topic exactly once, against Spark's Kafka sink. ``tag``
    names the output topics and the pipeline: the sink's transactional id and its marker are
    the pipeline's, so a second run under the same names would find the first one's batches
    "already sent"."""
    total = sum(len(f) for f in frames)
    expected = pd.concat(frames).groupby("k")["x"].sum()
    ours, theirs = f"sums_lakestream{tag}", f"sums_spark{tag}"
    for out in (ours, theirs):
        new_topic(bootstrap, out)
    timed: dict[str, list[float]] = defaultdict(list)
    with phase_times(timed, PHASES):
        run = drain_pipeline(spark, lakestream(bootstrap, topic, f"to_kafka{tag}", batch, to_topic=ours),
                             f"{workdir}/wh")
    runs = {OURS_KAFKA: run}
    phases = {OURS_KAFKA: per_batch(timed, len(run["batch_latencies"]), PHASES)}
    runs[ANCHOR_KAFKA] = drain_query(
        spark, as_kafka_records(anchor(spark, bootstrap, topic, batch)), f"{workdir}/anchor_kafka",
        sink="kafka", options={"kafka.bootstrap.servers": bootstrap, "topic": theirs})
    rows = []
    for (system, run), out in zip(runs.items(), (ours, theirs)):
        assert run["events"] == total, (system, run["events"], total)
        values = pd.DataFrame([json.loads(r["value"]) for r in read_topic(bootstrap, out, timeout=120)])
        finals = values.groupby("k", as_index=False)["total"].max().rename(columns={"total": "t"})
        rows.append(_rate_row(system, run, total, runs[ANCHOR_KAFKA]["seconds"], batch,
                              keys_agreeing=_agreeing(finals, expected), records_out=len(values)))
    return rows, phases


def _rate_row(system: str, run: dict, total: int, anchor_seconds: float, batch: int, **more) -> dict:
    rate = total / run["seconds"]
    return {"system": system, "events": total, "batch": batch, "events_per_s": rate,
            "x_anchor": anchor_seconds / run["seconds"], "batches": len(run["batch_latencies"]),
            "median_batch_s": statistics.median(run["batch_latencies"]), "seconds": run["seconds"],
            "checkpoint_s": statistics.median(run["checkpoint_seconds"]) if run.get("checkpoint_seconds")
            else None, "peak_rss_mb": run["peak_rss_mb"], "peak_jvm_heap_mb": run.get("peak_jvm_heap_mb"),
            **more}


def _agreeing(finals: pd.DataFrame, expected: pd.Series) -> int:
    """Keys whose largest running total (``t``) is their sum of ``x``: every event counted once."""
    got = finals.set_index("k")["t"]
    return int((got.reindex(expected.index) == expected).sum())


# --- latency ------------------------------------------------------------------------------------
class SinkWatch:
    """How many rows a Delta table holds, from its log: each commit file's ``add`` actions and
    their ``numRecords``. A version is visible to readers once its commit file exists (written
    whole, then renamed into place), so this sees rows when any reader's next snapshot would,
    without Spark."""

    def __init__(self, table: str):
        self.log = Path(table) / "_delta_log"
        self.version, self.rows = -1, 0

    def scan(self) -> None:
        """Count the commits that appeared since the last scan."""
        while True:
            commit = self.log / f"{self.version + 1:020d}.json"
            try:
                actions = [json.loads(line) for line in commit.read_text().splitlines()]
            except FileNotFoundError:
                return  # not committed yet (or no table yet)
            except json.JSONDecodeError:
                return  # caught mid-write by a log store that does not rename: read it next time
            self.rows += sum(json.loads(a["add"]["stats"])["numRecords"] for a in actions if "add" in a)
            self.version += 1

    def wait_for(self, rows: int, deadline: float) -> float:
        """The ``time.time()`` at which the table first held ``rows`` rows (polled every 10 ms)."""
        while time.time() < deadline:
            self.scan()
            if self.rows >= rows:
                return time.time()
            time.sleep(POLL_S)
        raise TimeoutError(f"{self.log.parent} held {self.rows} rows, not {rows}, after "
                           f"{VISIBLE_WITHIN_S:g} s")


class LatencyRig:
    """Both systems on their own topic, fed the same records round by round."""

    def __init__(self, spark, bootstrap: str, workdir: str, trigger_ms: int):
        self.spark, self.bootstrap = spark, bootstrap
        self.warehouse = f"{workdir}/lat_wh"
        new_topic(bootstrap, "latency_lakestream")
        new_topic(bootstrap, "latency_spark")
        self.pipeline = lakestream(bootstrap, "latency_lakestream", "latency")
        self.ours = SinkWatch(self.pipeline.table_path("out", self.warehouse))
        where = f"{workdir}/lat_anchor"
        self.query = (anchor(spark, bootstrap, "latency_spark").writeStream.format("delta")
                      .outputMode("append").option("checkpointLocation", f"{where}/checkpoint")
                      .trigger(processingTime=f"{trigger_ms} milliseconds").start(f"{where}/out"))
        self.theirs = SinkWatch(f"{where}/out")
        self.spark_batch = -1  # the last progress report already counted
        self.watcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sink-watch")

    def round_ours(self, frame: pd.DataFrame) -> dict:
        phases: dict[str, list[float]] = defaultdict(list)
        started = time.time()
        visible = self.watcher.submit(self.ours.wait_for, self.ours.rows + len(frame),
                                      started + VISIBLE_WITHIN_S)
        produce(self.bootstrap, "latency_lakestream", frame)
        produced = time.time()
        with phase_times(phases, PHASES):
            report = self.pipeline.run_once(self.spark, self.warehouse)
        ran = time.time()
        assert report.rows_in == len(frame), report
        return {"latency_s": visible.result() - started, "produce_s": produced - started,
                "run_s": ran - produced, "batches": len(report.batches),
                "phases": {phase: sum(phases[phase]) for phase in PHASES if phases[phase]}}

    def round_anchor(self, frame: pd.DataFrame) -> dict:
        started = time.time()
        visible = self.watcher.submit(self.theirs.wait_for, self.theirs.rows + len(frame),
                                      started + VISIBLE_WITHIN_S)
        produce(self.bootstrap, "latency_spark", frame)
        produced = time.time()
        seen = visible.result()
        self.query.processAllAvailable()  # its offsets and commit log written before the next round
        progress = [p for p in self.query.recentProgress
                    if p["batchId"] > self.spark_batch and p["numInputRows"]]
        self.spark_batch = max([p["batchId"] for p in progress], default=self.spark_batch)
        phases: dict[str, float] = defaultdict(float)
        for report in progress:
            for phase, millis in report["durationMs"].items():
                phases[phase] += millis / 1000
        return {"latency_s": seen - started, "produce_s": produced - started,
                "batches": len(progress), "phases": dict(phases)}

    def close(self) -> None:
        self.query.stop()
        self.watcher.shutdown(wait=True)


def latency(spark, bootstrap: str, workdir: str, keys: int, rounds: int, per_round: int,
            trigger_ms: int) -> tuple[list[dict], dict]:
    """``rounds`` timed rounds (after :data:`WARM_ROUNDS` untimed ones) of ``per_round``
    records; rows for the table and each system's median seconds per phase."""
    frames = list(events(keys, [per_round] * (WARM_ROUNDS + rounds), seed=7))
    rig = LatencyRig(spark, bootstrap, workdir, trigger_ms)
    measured: dict[str, list[dict]] = {"lakestream vectorized": [], ANCHOR: []}
    try:
        for n, frame in enumerate(frames):
            sides = [("lakestream vectorized", rig.round_ours), (ANCHOR, rig.round_anchor)]
            for system, measure in sides if n % 2 == 0 else sides[::-1]:  # neither always first
                result = measure(frame)
                if n >= WARM_ROUNDS:
                    measured[system].append(result)
    finally:
        rig.close()
    rows, phases = [], {}
    for system, results in measured.items():
        seconds = sorted(r["latency_s"] for r in results)
        runs = [r["run_s"] for r in results if "run_s" in r]
        rows.append({"system": system, "rounds": len(results), "records_per_round": per_round,
                     "p50_s": statistics.median(seconds), "p99_s": _quantile(seconds, 0.99),
                     "max_s": seconds[-1],
                     "produce_p50_s": statistics.median(r["produce_s"] for r in results),
                     "run_p50_s": statistics.median(runs) if runs else None, "latencies_s": seconds})
        names = dict.fromkeys(phase for r in results for phase in r["phases"])  # in the order seen
        phases[system] = {phase: statistics.median(r["phases"].get(phase, 0.0) for r in results)
                          for phase in names}
    return rows, phases


def _quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated (with 20 rounds p99 is near the largest)."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# --- the workload --------------------------------------------------------------------------------
def warm_up(spark, bootstrap: str, workdir: str, per_key: bool, kafka_sink: bool) -> None:
    """Every code path once on a small topic, untimed, so no side is timed on a cold JVM."""
    frames = list(events(1_000, [4_000, 2_000], seed=3))
    new_topic(bootstrap, "warm", frames)
    throughput(spark, bootstrap, f"{workdir}/warm", "warm", frames, 2_000, per_key)
    if kafka_sink:
        kafka_sinks(spark, bootstrap, f"{workdir}/warm", "warm", frames, 2_000, tag="_warm")


def kafka_workload(spark, workdir: str, events_n: int, keys: int, batch: int, rounds: int,
                   per_round: int, trigger_ms: int, per_key: bool = True, kafka_sink: bool = True) -> dict:
    """The whole workload on its own embedded broker (stopped by its pid at the end)."""
    broker = EmbeddedKafka.start(f"{workdir}/broker")
    try:
        bootstrap = broker.bootstrap
        warm_up(spark, bootstrap, workdir, per_key, kafka_sink)
        frames = list(events(keys, [events_n]))
        started = time.perf_counter()
        new_topic(bootstrap, "events", frames)
        result: dict = {"events": events_n, "keys": keys, "batch": batch, "partitions": PARTITIONS,
                        "produce_events_per_s": events_n / (time.perf_counter() - started)}
        result["throughput"], result["phases"] = throughput(spark, bootstrap, workdir, "events", frames,
                                                            batch, per_key)
        if kafka_sink:
            result["kafka_sink"], phases = kafka_sinks(spark, bootstrap, workdir, "events", frames, batch)
            result["phases"].update(phases)
        result["latency"], result["latency_phases"] = latency(spark, bootstrap, workdir, keys, rounds,
                                                              per_round, trigger_ms)
        result["trigger_ms"] = trigger_ms
    finally:
        broker.stop()
    return result


def versions(spark) -> dict:
    import confluent_kafka

    return {"kafka_broker": KAFKA_BROKER_VERSION, "spark": spark.version,
            "confluent_kafka": confluent_kafka.version(), "librdkafka": confluent_kafka.libversion()[0]}


def print_tables(result: dict) -> None:
    title = (f"{result['events']:,} events over {result['keys']:,} keys from a {result['partitions']}-"
             f"partition topic, batches of {result['batch']:,} offsets")
    columns = ["system", "events_per_s", "x_anchor", "batches", "median_batch_s", "checkpoint_s",
               "keys_agreeing", "peak_rss_mb"]
    _table(f"throughput into Delta: {title}", result["throughput"], columns)
    if result.get("kafka_sink"):
        _table(f"throughput into a Kafka topic: {title}", result["kafka_sink"], columns + ["records_out"])
    _table(f"latency, produce -> visible in the Delta sink (Spark trigger {result['trigger_ms']} ms)",
           result["latency"], ["system", "rounds", "records_per_round", "p50_s", "p99_s", "max_s",
                               "produce_p50_s", "run_p50_s"])
    for where, phases in (("per batch, throughput", result["phases"]),
                          ("median per round, latency", result["latency_phases"])):
        for system, seconds in phases.items():
            print_table(f"where the time goes, {where}: {system}", ["phase", "seconds"],
                        [[phase, value] for phase, value in seconds.items()])


def _table(title: str, rows: list[dict], columns: list[str]) -> None:
    print_table(title, columns, [["" if row.get(c) is None else row[c] for c in columns] for row in rows])
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100_000, help="offsets per micro-batch: "
                        "lakestream's max_records, Spark's maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=20, help="timed latency rounds")
    parser.add_argument("--round-events", type=int, default=100, help="records per latency round")
    parser.add_argument("--trigger-ms", type=int, default=100, help="the Spark latency query's trigger")
    parser.add_argument("--no-per-key", action="store_true", help="skip lakestream's per-key mode")
    parser.add_argument("--no-kafka-sink", action="store_true", help="skip the Kafka-sink variant")
    args = parser.parse_args()
    # as the suite: local[2], 2 shuffle partitions, 2 GiB of driver heap for both systems
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2,
                                            extra={"spark.driver.memory": "2g"}))
    workdir = tempfile.mkdtemp(prefix="lakestream-kafka-")
    started, load_before = time.perf_counter(), os.getloadavg()  # others' work on the box shows here
    try:
        result = kafka_workload(spark, workdir, args.events, args.keys, args.batch, args.rounds,
                                args.round_events, args.trigger_ms, per_key=not args.no_per_key,
                                kafka_sink=not args.no_kafka_sink)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result.update(versions=versions(spark), measured_at=time.strftime("%Y-%m-%d %H:%M"),
                  seconds=time.perf_counter() - started, load_average_before=load_before,
                  load_average_after=os.getloadavg())
    print_tables(result)
    path = write_results("kafka", result)
    print(f"\nresults: {path} ({result['seconds'] / 60:.1f} min; {result['versions']})")


if __name__ == "__main__":
    main()
