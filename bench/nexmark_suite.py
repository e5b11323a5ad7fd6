"""Nexmark side by side, in one run: every query q0–q22 on the same generated stream through
lakestream (driver and distributed mode, ``bench/nexmark/queries.py``), Flink SQL (the
nexmark repository's text, ``bench/nexmark/flink.py``) and Spark Structured Streaming
(``bench/nexmark/spark_streaming.py``, the queries Spark runs as a stream); each answer
checked against the brute-force one (``bench/nexmark/oracle.py``), so a fast wrong answer
shows, and with it against every other engine's.

The stream: ``--batches`` batches of ``--events`` events each (persons, auctions, bids
1 : 3 : 46), a Delta commit per batch and kind (lakestream and Spark read one commit per
batch) and the same rows as Parquet files (Flink reads them, concatenated, as one split per
kind). ``events_per_s``: the stream's events (all three kinds, as Nexmark counts them) over
an arm's seconds:

- lakestream: every statement's ``run_once`` draining every batch (planning, state and sink
  commits, checkpoints), in this process's Spark session (``local[2]``);
- Flink: from submitting the INSERT to the job's end, mini-cluster start included, in a
  process of its own (parallelism 2), peak RSS that process tree's;
- Spark: from ``start()`` to the end of ``Trigger.AvailableNow``, in this process's session.

Every arm is warmed up first on a 2 x 2,000-event stream, in the process it is timed in.
``--cluster`` adds distributed mode on a standalone cluster of one worker, then two (1 core
each, loopback): the scaling per query.

    .venv/bin/python bench/nexmark_suite.py                      # 3 x 50,000 events, all arms
    .venv/bin/python bench/nexmark_suite.py --events 20000 --queries q0,q5,q11 --arms driver,flink
    .venv/bin/python bench/nexmark_suite.py --cluster            # and the 1- and 2-worker runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import headline, peak_memory, print_table, write_results  # noqa: E402

import ops as sp  # noqa: E402
from bench.nexmark import flink_answers, lakestream, oracle, spark_streaming  # noqa: E402
from bench.nexmark.generator import NexmarkConfig  # noqa: E402
from bench.nexmark.queries import QUERIES, Query  # noqa: E402
from bench.nexmark.streams import all_of, write_stream  # noqa: E402

ARMS = ("driver", "distributed", "flink", "spark")
WARM = (2, 2_000)  # batches, events per batch


class Stream:
    """A generated stream: its folder and batches (for the oracle)."""

    def __init__(self, folder: Path, config: NexmarkConfig, batches: int, events: int):
        self.folder, self.events = str(folder), batches * events
        self.batches = write_stream(self.folder, config, batches, events)
        self.stream_time = all_of(self.batches, "bid")["dateTime"].max()

    def check(self, name: str, rows, expected=None) -> str | None:
        """What differs from the oracle's answer, ``None`` when nothing does."""
        if expected is None:
            expected = oracle.answer(name, self.batches)
        return oracle.same_rows(rows, expected)


def lakestream_arm(spark, query: Query, stream: Stream, work: Path, mode: str) -> dict:
    measured: dict = {}
    with peak_memory(measured, spark):
        answer = lakestream.run(spark, query, stream.folder, str(work / f"{mode}-{query.name}"),
                                mode, max_versions=1)
    return _outcome(answer.seconds, len(answer.rows), measured["peak_rss_mb"],
                    stream.check(query.name, answer.rows))


def flink_arm(query: Query, stream: Stream, warm: Stream, work: Path) -> dict:
    try:
        run = flink_answers.run(query.name, stream.folder, str(work / f"flink-{query.name}"),
                                warm=warm.folder)
    except RuntimeError as failed:
        return {"failed": str(failed)}
    if not query.expressed:  # no oracle: nothing to check against
        return _outcome(run.seconds, len(run.rows), run.peak_rss_mb, None, checked=False)
    got = flink_answers.as_oracle(query.name, run.rows, stream.stream_time)
    expected = flink_answers.expected_of_flink(query.name, stream.batches)
    return _outcome(run.seconds, len(got), run.peak_rss_mb, stream.check(query.name, got, expected))


def spark_arm(spark, query: Query, stream: Stream, warm: Stream, work: Path) -> dict:
    if query.name not in spark_streaming.QUERIES:
        return {"failed": spark_streaming.REFUSED.get(query.name, "not expressed here")}
    spark_streaming.run(spark, query.name, warm.folder, str(work / f"warm-spark-{query.name}"))
    measured: dict = {}
    with peak_memory(measured, spark):
        run = spark_streaming.run(spark, query.name, stream.folder, str(work / f"spark-{query.name}"))
    return _outcome(run.seconds, len(run.rows), measured["peak_rss_mb"],
                    stream.check(query.name, run.rows))


def _outcome(seconds: float, rows: int, peak_rss_mb: float, difference: str | None,
             checked: bool = True) -> dict:
    return {"seconds": seconds, "rows": rows, "peak_rss_mb": peak_rss_mb,
            "agrees": (difference is None) if checked else None, "difference": difference}


def run_arms(query: Query, arms: list[str], spark, stream: Stream, warm: Stream,
             work: Path) -> dict[str, dict]:
    runs: dict[str, dict] = {}
    for arm in arms:
        if arm in ("driver", "distributed"):
            if not query.expressed:
                runs[arm] = {"failed": "not expressed (bench/nexmark/queries.py says what is missing)"}
                continue
            lakestream_arm(spark, query, warm, work / "warm", arm)
            runs[arm] = lakestream_arm(spark, query, stream, work, arm)
        elif arm == "flink":
            runs[arm] = flink_arm(query, stream, warm, work)
        else:
            runs[arm] = spark_arm(spark, query, stream, warm, work)
        if runs[arm].get("agrees") is False:
            print(f"{query.name} {arm}: {runs[arm]['difference']}", file=sys.stderr)
    return runs


def rate(run: dict, events: int) -> float | None:
    return events / run["seconds"] if "seconds" in run else None


def ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top and bottom else None


def speed_table(chosen: list[Query], results: dict, arms: list[str], events: int) -> list[list]:
    rows = []
    for query in chosen:
        runs = results[query.name]
        speeds = {arm: rate(runs[arm], events) for arm in arms}
        rows.append([query.name, query.form if query.expressed else "—",
                     *[speeds[arm] for arm in arms],
                     ratio(speeds.get("driver"), speeds.get("flink")),
                     ratio(speeds.get("distributed"), speeds.get("driver")),
                     " ".join(f"{arm}:{'=' if runs[arm]['agrees'] else 'WRONG'}"
                              for arm in arms if runs[arm].get("agrees") is not None)])
    return rows


def memory_table(chosen: list[Query], results: dict, arms: list[str]) -> list[list]:
    return [[query.name, *[results[query.name][arm].get("peak_rss_mb") for arm in arms]]
            for query in chosen]


def why_not(chosen: list[Query], results: dict, arms: list[str]) -> list[str]:
    """A line per arm that did not run a query, and why."""
    return [f"  {query.name} {arm}: {results[query.name][arm]['failed']}" for query in chosen
            for arm in arms if "failed" in results[query.name][arm]]


def cluster_part(args, chosen: list[Query], work: Path) -> dict:
    """Distributed mode on a standalone cluster of 1, then 2 workers, each in a child run of
    this script; events/s per query and the 2 / 1 ratio."""
    from tests.cluster.standalone import standalone_cluster
    os.environ.update(PYSPARK_PYTHON=sys.executable,
                      PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]))
    speeds: dict[int, dict] = {}
    for workers in (1, 2):
        with standalone_cluster(work / f"spark{workers}", workers=workers, memory="2g") as cluster:
            out = work / f"cluster{workers}.json"
            subprocess.run([sys.executable, __file__, "--events", str(args.events), "--batches",
                            str(args.batches), "--rate", str(args.rate), "--queries",
                            ",".join(q.name for q in chosen), "--arms", "distributed",
                            "--master", cluster.master_url, "--json", str(out)],
                           check=True, timeout=7200)
        runs = json.loads(out.read_text())["runs"]
        speeds[workers] = {name: rate(run["distributed"], args.events * args.batches)
                           for name, run in runs.items()}
    table = [[q.name, speeds[1][q.name], speeds[2][q.name], ratio(speeds[2][q.name], speeds[1][q.name])]
             for q in chosen]
    print_table(f"Nexmark distributed on a standalone cluster (1 core per worker), "
                f"{args.batches} x {args.events:,} events", ["query", "1 worker ev/s",
                                                             "2 workers ev/s", "2 / 1"], table)
    return {"rows": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=50_000, help="events per batch")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000, help="events per second of event time")
    parser.add_argument("--queries", default="", help="comma-separated names (default: all)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"some of {','.join(ARMS)}")
    parser.add_argument("--master", default="local[2]", help="Spark master of lakestream's arms")
    parser.add_argument("--cluster", action="store_true", help="add the 1- and 2-worker runs")
    parser.add_argument("--json", help="also write the runs here (what --cluster's children do)")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arms {unknown}: choose from {ARMS}")
    wanted = args.queries.split(",") if args.queries else []
    chosen = [q for q in QUERIES if not wanted or q.name in wanted]
    if "flink" not in arms:  # only Flink runs what lakestream does not express
        chosen = [q for q in chosen if q.expressed]
    spark = sp.spark_session(sp.SparkConfig(master=args.master, shuffle_partitions=2))
    work = Path(tempfile.mkdtemp(prefix="bench_nexmark_"))
    config = NexmarkConfig(seed=42, events_per_second=args.rate)
    # the warm-up's 4,000 events span 40 s of event time, so its windows close too (q5's
    # second pipeline reads the changelog a closed window first writes)
    warm = Stream(work / "warm", NexmarkConfig(seed=42, events_per_second=100), *WARM)
    stream = Stream(work / "stream", config, args.batches, args.events)
    results = {q.name: run_arms(q, arms, spark, stream, warm, work) for q in chosen}
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results}, default=str))
        return
    title = f"{args.batches} x {args.events:,} events ({args.rate:,} events/s of event time)"
    print_table(f"Nexmark events/s, {title}, {args.master}, Flink parallelism 2",
                ["query", "form", *[f"{arm} ev/s" for arm in arms], "driver / flink",
                 "distributed / driver", "answers"],
                speeds := speed_table(chosen, results, arms, stream.events))
    print_table("Nexmark peak RSS (MiB) of each arm's process tree", ["query", *arms],
                memory_table(chosen, results, arms))
    print("\nWhat did not run, and why:", *why_not(chosen, results, arms), sep="\n")
    scaling = cluster_part(args, [q for q in chosen if q.expressed], work) if args.cluster else {}
    write_results("nexmark", {"events": args.events, "batches": args.batches, "arms": arms,
                              "rows": speeds, "runs": results, "cluster": scaling})
    headline(f"nexmark_suite --events {args.events}", ", ".join(
        f"{row[0]} {row[2]:,.0f} ev/s" for row in speeds if row[2]))


if __name__ == "__main__":
    main()
