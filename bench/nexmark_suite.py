"""Nexmark on lakestream: every query it expresses (``bench/nexmark/queries.py``), each in
driver and distributed mode over the same generated stream, side by side in one run, every
answer checked against the brute-force one (``bench/nexmark/oracle.py``), so a fast wrong
answer shows.

The stream: ``--batches`` Delta commits of ``--events`` events each (persons, auctions, bids
1 : 3 : 46), read one commit per batch. Each arm is a fresh warehouse and one ``run_once``
per statement draining every batch (a chained query's statements run one after another); its
``seconds`` include every batch's planning and checkpoint. ``events_per_s`` is the stream's
events (all three kinds, as Nexmark counts) over those seconds. Both modes are warmed up first
on a small stream, in the same process and Spark session (``local[2]``).

    .venv/bin/python bench/nexmark_suite.py                         # 3 x 100,000 events
    .venv/bin/python bench/nexmark_suite.py --events 20000 --queries q0,q5,q11
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import headline, peak_memory, print_table, write_results  # noqa: E402

import ops as sp  # noqa: E402
from bench.nexmark import lakestream, oracle  # noqa: E402
from bench.nexmark.generator import NexmarkConfig  # noqa: E402
from bench.nexmark.queries import QUERIES, Query  # noqa: E402
from bench.nexmark.streams import write_stream  # noqa: E402


def arm(spark, query: Query, folder: str, warehouse: str, mode: str, batches) -> dict:
    """One query in one mode: its seconds, peak memory of the process tree, rows out, and
    whether they are the oracle's."""
    measured: dict = {}
    with peak_memory(measured, spark):
        answer = lakestream.run(spark, query, folder, warehouse, mode, max_versions=1)
    wrong = oracle.same_rows(answer.rows, oracle.answer(query.name, batches))
    return {"seconds": answer.seconds, "rows": len(answer.rows), "agrees": wrong is None,
            "peak_rss_mb": measured.get("peak_rss_mb", 0.0), "difference": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="events per batch")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000, help="events per second of event time")
    parser.add_argument("--queries", default="", help="comma-separated names (default: all)")
    parser.add_argument("--modes", default="driver,distributed")
    args = parser.parse_args()
    chosen = [q for q in QUERIES if q.statements and (not args.queries or q.name in args.queries.split(","))]
    modes = args.modes.split(",")
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    work = Path(tempfile.mkdtemp(prefix="bench_nexmark_"))
    config = NexmarkConfig(seed=42, events_per_second=args.rate)
    warm = write_stream(str(work / "warm"), config, 2, 2_000)
    for mode in modes:
        for query in chosen:
            arm(spark, query, str(work / "warm"), str(work / f"warm-{mode}-{query.name}"), mode, warm)
    batches = write_stream(str(work / "stream"), config, args.batches, args.events)
    total = args.events * args.batches
    table, results = [], {}
    for query in chosen:
        runs = {mode: arm(spark, query, str(work / "stream"), str(work / f"{mode}-{query.name}"),
                          mode, batches) for mode in modes}
        results[query.name] = runs
        row = [query.name, query.form, runs[modes[0]]["rows"]]
        for mode in modes:
            row += [total / runs[mode]["seconds"], runs[mode]["peak_rss_mb"],
                    "yes" if runs[mode]["agrees"] else "NO"]
        if len(modes) == 2:
            row.append(runs[modes[0]]["seconds"] / runs[modes[1]]["seconds"])
        table.append(row)
        for mode, run in runs.items():
            if not run["agrees"]:
                print(f"{query.name} {mode}: {run['difference']}", file=sys.stderr)
    header = ["query", "form", "rows"]
    for mode in modes:
        header += [f"{mode} ev/s", f"{mode} peak MiB", f"{mode} = oracle"]
    if len(modes) == 2:
        header.append(f"{modes[1]} / {modes[0]}")
    print_table(f"Nexmark, {args.batches} x {args.events:,} events ({args.rate:,} events/s of "
                "event time), local[2]", header, table)
    write_results("nexmark", {"events": args.events, "batches": args.batches, "rows": table,
                              "runs": results})
    headline(f"nexmark_suite --events {args.events}", ", ".join(
        f"{row[0]} {row[3]:,.0f} ev/s" for row in table))


if __name__ == "__main__":
    main()
