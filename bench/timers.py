"""What timers and state TTL cost a keyed running sum, against the same sum without them and
against Spark's ``applyInPandasWithState`` with a processing-time timeout, side by side in one
run on the same Delta input (one commit per micro-batch on every side).

Every call sets its key's timer an hour ahead (so none fires: this is the bookkeeping cost of
the common "session timeout" shape, where each key's timer moves with its data), or, for TTL,
renews its key's expiry. Printed ratios are against the same mode without timers.

    .venv/bin/python bench/timers.py --keys 10000 --batch 100000 --batches 3
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


from _common import print_table, write_results  # noqa: E402
from running_sum import (  # noqa: E402
    drain_pipeline,
    events,
    per_key_sum,
    run_anchor,
    vectorized_sum,
    write_batches,
)

import ops as sp  # noqa: E402


def per_key_with_timer(op, md, data):
    sp.set_timer(op, md, after="1h")
    return per_key_sum(op, md, data)


def vectorized_with_timer(op, md, data):
    sp.set_timer(op, md, after="1h")
    return vectorized_sum(op, md, data)


VARIANTS = {  # name -> (function, vectorized, map options)
    "per-key": (per_key_sum, False, {}),
    "per-key + timer": (per_key_with_timer, False, {"timers": True}),
    "per-key + ttl": (per_key_sum, False, {"ttl": "1h"}),
    "vectorized": (vectorized_sum, True, {}),
    "vectorized + timer": (vectorized_with_timer, True, {"timers": True}),
    "vectorized + ttl": (vectorized_sum, True, {"ttl": "1h"}),
}


def run_variant(spark, source: str, warehouse: str, name: str) -> dict:
    fn, vectorized, options = VARIANTS[name]
    pipeline = (sp.read.from_delta(source, key="k", order_by=("seq",), max_versions=1)
                .map(fn, state=0, vectorized=vectorized, name="sum", **options)
                .write.to_delta("out")).named(name.replace(" + ", "_").replace("-", "_"))
    return drain_pipeline(spark, pipeline, warehouse)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    spark = sp.spark_session()
    workdir = tempfile.mkdtemp(prefix="lakestream-timers-")
    warm = f"{workdir}/warm"
    write_batches(spark, warm, events(1_000, [5_000, 1_000]))
    for name in VARIANTS:  # every code path once on a warm JVM before timing
        run_variant(spark, warm, f"{workdir}/warm_wh", name)
    source = f"{workdir}/events"
    total = write_batches(spark, source, events(args.keys, [args.batch] * args.batches))
    runs = {name: run_variant(spark, source, f"{workdir}/wh", name) for name in VARIANTS}
    runs["anchor: applyInPandasWithState + timeout"] = run_anchor(
        spark, source, f"{workdir}/anchor", timeout_ms=3_600_000)
    rows = []
    for name, run in runs.items():
        assert run["events"] == total, (name, run["events"], total)
        plain = runs.get(name.split(" + ")[0], run)
        rows.append({"system": name, "events_per_s": total / run["seconds"],
                     "x_without": plain["seconds"] / run["seconds"],
                     "median_batch_s": statistics.median(run["batch_latencies"]),
                     "peak_rss_mb": run["peak_rss_mb"]})
    columns = ["system", "events_per_s", "x_without", "median_batch_s", "peak_rss_mb"]
    print_table(f"{total} events over {args.keys} keys, {args.batches} batches; x_without: "
                "speed against the same mode without timers", columns,
                [[row[c] for c in columns] for row in rows])
    write_results("timers", {"keys": args.keys, "batch": args.batch, "batches": args.batches,
                             "measured_at": time.strftime("%Y-%m-%d %H:%M"), "rows": rows})


if __name__ == "__main__":
    main()
