"""Driver mode against distributed mode as batches grow, and one worker against two.

Part 1 (``local[2]``): the keyed running sum, vectorized and per key, on N events per batch over
N keys (a Delta source, one commit per batch), for each N in ``--sizes``:

The first batch of each configuration warms up Spark (not timed); then

- ``warm``: one run drains the other ``--batches - 1`` batches (state stays in the driver between batches in
  driver mode);
- ``cold``: one batch per run, each run a new ``run_once`` (as sensor-started runs are), so
  each batch reads its keys' state from ``_state`` first;
- ``drained`` (``bench/limit.py``'s): no warm-up run; one run from an empty state through
  every batch, so from batch 2 on it holds its keys from the batch before.

Each configuration runs in its own process, so the driver's peak RSS is that configuration's.
Reported: events/s, mean batch and checkpoint seconds, driver Python peak RSS, driver JVM heap
peak, and distributed/driver ratios of events/s measured in this run.

``--modes distributed`` measures one mode only (driver mode at 3M events per batch needs GBs),
``--workloads vectorized`` one workload.

Part 2 (``--cluster``): a standalone cluster on loopback with 1 worker, then 2 (1 core each),
running a compute-bound per-key function (``SCALE_BUSY_US`` µs of Python per row, default 50)
in distributed mode, ``--cluster-events`` per batch over ``--cluster-keys`` keys (10 rows per
key by default, so the function's own work, not the call per key, is most of a task).

Part 3 (``--big-state``): distributed, vectorized: a first batch of ``--state-keys`` events over
as many keys (10M), then one run whose batch touches ``--touched`` of them (2M); the driver's
peak RSS over both.

    .venv/bin/python bench/scale.py --sizes 25000,250000,1000000 --batches 3
    .venv/bin/python bench/scale.py --sizes 25000,3000000 --batches 2 --modes distributed
    .venv/bin/python bench/scale.py --cluster --cluster-events 100000
    .venv/bin/python bench/scale.py --big-state --state-keys 10000000 --touched 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import peak_memory, peak_rss_mb, print_table, write_results  # noqa: E402
from running_sum import per_key_sum, vectorized_sum  # noqa: E402

import ops as sp  # noqa: E402

WORKLOADS = ("vectorized", "per_key")


def busy_sum(op, md, data):
    """The per-key running sum plus ``BUSY_US`` µs of pure Python per row (compute-bound)."""
    spin_until = time.perf_counter() + len(data) * BUSY_US / 1e6
    while time.perf_counter() < spin_until:
        pass
    return per_key_sum(op, md, data)


BUSY_US = float(os.environ.get("SCALE_BUSY_US", "50"))


def pipeline(source: str, workload: str, mode: str, name: str) -> sp.Pipeline:
    # the events are written in seq order, one file per commit: the table's own order is seq's,
    # and reading in it needs no sort (order_by=("seq",) would sort each batch again)
    stream = sp.read.from_delta(source, key="k", max_versions=1)
    if workload in ("vectorized", "vectorized_typed"):  # typed: its state in int64 columns
        typed = {"state_type": int} if workload == "vectorized_typed" else {}
        stream = stream.map(vectorized_sum, state=0, vectorized=True, name="sum", **typed)
    elif workload == "busy":
        stream = stream.map(busy_sum, state=0, name="sum")
    else:
        stream = stream.map(per_key_sum, state=0, name="sum")
    return stream.write.to_delta("out").named(name).with_mode(mode)


def write_input(spark, path: str, size: int, batches: int, keys: int | None = None) -> None:
    """``batches`` commits of ``size`` events over ``keys`` keys (default ``size``; uniform),
    change feed on."""
    from pyspark.sql import functions as F
    for batch in range(batches):
        rows = spark.range(size).select(
            (F.rand(batch) * (keys or size)).cast("long").alias("k"),
            (F.rand(batch + 100) * 99 + 1).cast("long").alias("x"),
            F.col("id").alias("seq"))
        writer = rows.write.format("delta").mode("append")
        if batch == 0:
            writer = writer.option("delta.enableChangeDataFeed", "true")
        writer.save(path)


# -- one configuration, in a child process ---------------------------------------------------
def child(config: dict) -> dict:
    spark = _session(sp.SparkConfig(master=config["master"], shuffle_partitions=config["partitions"],
                                    extra=config.get("spark", {})), config["mode"])
    built = pipeline(config["source"], config["workload"], config["mode"], config["name"])
    if config["temperature"] == "drained":
        return _drained(spark, built, config["warehouse"])
    result: dict = {}
    reports = []
    built.run_once(spark, config["warehouse"], max_batches=1)  # warm-up: JIT, caches, batch 1
    # pid -1: no tree sampling, only the JVM heap (none, when no JVM started)
    with peak_memory(result, spark if _started(spark) else None, pid=-1):
        started = time.perf_counter()
        if config["temperature"] == "warm":
            reports.append(built.run_once(spark, config["warehouse"]))
        else:
            for _ in range(config["batches"] - 1):
                reports.append(built.run_once(spark, config["warehouse"], max_batches=1))
        seconds = time.perf_counter() - started
    _stop(spark)
    batches = [b for r in reports for b in r.batches]
    return {**_figures(batches, batches, seconds, [s for r in reports for s in r.checkpoint_seconds]),
            "jvm_heap_mb": result.get("peak_jvm_heap_mb", 0.0)}


def _drained(spark, built: sp.Pipeline, warehouse: str) -> dict:
    """One run from an empty state through every batch: from batch 2 on it holds its keys from
    the batch before, in the same run. Timed by batches 2..N (``batches_events_per_s``) and as
    the whole run, every batch by the wall clock (``events_per_s``)."""
    started = time.perf_counter()
    report = built.run_once(spark, warehouse)
    seconds = time.perf_counter() - started
    _stop(spark)
    return _figures(report.batches[1:], report.batches, seconds, report.checkpoint_seconds)


def _session(config: sp.SparkConfig, mode: str):
    """What a sensor-started (Dagster) run gets: a session that starts only if the run needs
    it (driver mode on a local disk does not); a checkout from before lazy sessions, and
    distributed mode, start it now."""
    lazy = getattr(sp, "lazy_spark_session", None)
    return lazy(config) if lazy is not None and mode == "driver" else sp.spark_session(config)


def _started(spark) -> bool:
    return getattr(spark, "started", True)


def _stop(spark) -> None:
    if _started(spark):
        spark.stop()


def _figures(timed: list, walled: list, seconds: float, checkpoints: list[float]) -> dict:
    """A configuration's figures: ``events_per_s`` is ``walled``'s events over the wall clock's
    ``seconds``; ``batches_events_per_s``, ``batch_s`` and ``events`` are of the ``timed``
    batches, by their own seconds."""
    busy = sum(b.seconds for b in timed)
    events = sum(b.rows_in for b in timed)
    return {"events_per_s": sum(b.rows_in for b in walled) / seconds,
            "batches_events_per_s": events / busy, "batch_s": busy / len(timed),
            "checkpoint_s": sum(checkpoints) / max(len(checkpoints), 1), "events": events,
            "driver_rss_mb": peak_rss_mb(), "modes": sorted({b.mode for b in walled})}


def executor_env() -> dict[str, str]:
    """What executors need (local ones, and a standalone worker's, which inherit it): this
    interpreter, and the running sums from bench/running_sum.py on their path."""
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, SCALE_BUSY_US=str(BUSY_US),
                PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]))


def run_child(config: dict) -> dict:
    # SCALE_SPARK_CONF: more Spark settings, JSON (e.g. {"spark.driver.memory": "6g"} at 3M)
    config = {"spark": json.loads(os.environ.get("SCALE_SPARK_CONF", "{}")), **config}
    env = executor_env()
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{config['name']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the two parts -----------------------------------------------------------------------------
def local_part(sizes: list[int], batches: int, workdir: Path,
               modes: tuple[str, ...] = ("driver", "distributed"),
               workloads: tuple[str, ...] = WORKLOADS) -> list[dict]:
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=8))
    for size in sizes:
        write_input(spark, str(workdir / f"input_{size}"), size, batches)
    spark.stop()
    rows = []
    for size in sizes:
        for workload in workloads:
            measured = {}
            for temperature in ("warm", "cold"):
                for mode in modes:
                    name = f"scale_{workload}_{size}_{temperature}_{mode}"
                    measured[(temperature, mode)] = got = run_child({
                        "master": "local[2]", "partitions": 8, "source": str(workdir / f"input_{size}"),
                        "workload": workload, "mode": mode, "name": name, "batches": batches,
                        "temperature": temperature, "warehouse": str(workdir / name)})
                    rows.append({"events/batch": size, "workload": workload, "run": temperature,
                                 "mode": mode, **{k: v for k, v in got.items() if k != "modes"}})
                    print(json.dumps(rows[-1]), flush=True)
            if len(modes) < 2:
                continue
            for temperature in ("warm", "cold"):
                rows.append({"events/batch": size, "workload": workload, "run": temperature,
                             "mode": "distributed / driver",
                             "events_per_s": measured[(temperature, "distributed")]["events_per_s"]
                             / measured[(temperature, "driver")]["events_per_s"]})
            rows.append({"events/batch": size, "workload": workload, "run": "cold / warm",
                         "mode": "distributed cold / driver warm",
                         "events_per_s": measured[("cold", "distributed")]["events_per_s"]
                         / measured[("warm", "driver")]["events_per_s"]})
    return rows


def cluster_part(events: int, keys: int, batches: int, workdir: Path) -> list[dict]:
    from tests.cluster.standalone import standalone_cluster
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=8))
    source = str(workdir / "busy_input")
    write_input(spark, source, events, batches, keys)
    spark.stop()
    rows, speed = [], {}
    os.environ.update(executor_env())  # the workers' own environment
    for workers in (1, 2):
        with standalone_cluster(workdir / f"spark{workers}", workers=workers, memory="2g") as cluster:
            name = f"scale_busy_{workers}w"
            got = run_child({"master": cluster.master_url, "partitions": 8, "source": source,
                             "workload": "busy", "mode": "distributed", "name": name,
                             "batches": batches, "temperature": "warm",
                             "warehouse": str(workdir / name)})
        speed[workers] = got["events_per_s"]
        rows.append({"workers": workers, **{k: v for k, v in got.items() if k != "modes"}})
        print(json.dumps(rows[-1]), flush=True)
    rows.append({"workers": "2 / 1", "events_per_s": speed[2] / speed[1]})
    return rows


def big_state_part(keys: int, touched: int, workdir: Path) -> list[dict]:
    """``keys`` events over as many keys, then a batch of ``touched`` events over some of them."""
    from pyspark.sql import functions as F
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=8))
    source = str(workdir / "big_state_input")
    (spark.range(keys).select(F.col("id").alias("k"), F.lit(1).cast("long").alias("x"),
                              F.col("id").alias("seq"))
     .write.format("delta").option("delta.enableChangeDataFeed", "true").save(source))
    (spark.range(touched).select((F.rand(7) * keys).cast("long").alias("k"),
                                 F.lit(2).cast("long").alias("x"), F.col("id").alias("seq"))
     .write.format("delta").mode("append").save(source))
    spark.stop()
    got = run_child({"master": "local[2]", "partitions": 8, "source": source,
                     "workload": "vectorized", "mode": "distributed", "name": "scale_big_state",
                     # local mode's executors live in the driver's JVM: 1 GB (the default)
                     # cannot shuffle 10M rows
                     "spark": {"spark.driver.memory": "6g"},
                     "batches": 2, "temperature": "cold", "warehouse": str(workdir / "big")})
    return [{"state keys": keys, "batch touches": touched,
             **{k: v for k, v in got.items() if k != "modes"}}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="25000,250000,1000000")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--cluster-events", type=int, default=100_000)
    parser.add_argument("--cluster-keys", type=int, default=10_000)
    parser.add_argument("--modes", default="driver,distributed")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--big-state", action="store_true")
    parser.add_argument("--state-keys", type=int, default=10_000_000)
    parser.add_argument("--touched", type=int, default=2_000_000)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    workdir = Path(tempfile.mkdtemp(prefix="lakestream-scale-"))
    if args.cluster:
        rows = cluster_part(args.cluster_events, args.cluster_keys, args.batches, workdir)
        show("compute-bound per-key sum, distributed, standalone cluster", rows)
        write_results("scale_cluster", {"rows": rows})
        return
    if args.big_state:
        rows = big_state_part(args.state_keys, args.touched, workdir)
        show("10M keys of state, a batch touching 2M, distributed", rows)
        write_results("scale_big_state", {"rows": rows})
        return
    rows = local_part([int(s) for s in args.sizes.split(",")], args.batches, workdir,
                      tuple(args.modes.split(",")), tuple(args.workloads.split(",")))
    show("running sum, driver vs distributed, local[2]", rows)
    write_results("scale_" + "_".join([args.sizes, args.modes, args.workloads]).replace(",", "-"),
                  {"rows": rows})


def show(title: str, rows: list[dict]) -> None:
    header = list(dict.fromkeys(key for row in rows for key in row))
    print_table(title, header, [[row.get(key, "") for key in header] for row in rows])


if __name__ == "__main__":
    main()
