"""A run in a fresh process (a sensor-started run, ``dagster job execute``): with the driver's
class archive against without it, alternating, side by side.

Each arm is a new Python process that starts Spark (``local[2]``), publishes one batch of 1,000
events over 100 keys and runs it (the keyed running sum into a Delta sink, one checkpoint), then
a second batch in a second run in the same process, which recovers from the first's checkpoint.
The arms differ only in ``LAKESTREAM_CLASS_ARCHIVE``. The archive must exist (``.ci/install``
makes it).

    .venv/bin/python bench/process_start.py            # 5 rounds, ~4 min
    .venv/bin/python bench/process_start.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import print_table, write_results  # noqa: E402

PHASES = ("session_s", "first_run_s", "second_run_s", "process_s")


def _running_sum(op, md, data):
    import ops as sp

    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, float(total.iloc[-1]))
    return data.assign(total=total)


def child(warehouse: str) -> dict[str, float]:
    """One arm's process: the timed phases, as JSON on stdout."""
    started = time.perf_counter()
    import ops as sp

    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=2))
    times = {"session_s": time.perf_counter() - started}
    pipeline = (sp.read.from_callback("events", key="k", schema={"k": "long", "x": "double"})
                .map(_running_sum, state=0.0, name="running_sum")
                .write.to_delta("totals")).named("process_start")
    for batch, phase in enumerate(("first_run_s", "second_run_s")):
        pipeline.publish(spark, [{"k": i % 100, "x": float(batch)} for i in range(1000)], warehouse)
        began = time.perf_counter()
        pipeline.run_once(spark, warehouse)
        times[phase] = time.perf_counter() - began
    return times


def _arm(archive: bool) -> dict[str, float]:
    env = dict(os.environ, LAKESTREAM_CLASS_ARCHIVE="on" if archive else "off",
               PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as warehouse:
        began = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--child", warehouse], env=env,
                              capture_output=True, text=True, timeout=600, check=True)
        times = json.loads(done.stdout.strip().splitlines()[-1])
    return {**times, "process_s": time.perf_counter() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    from ops.spark import class_archive
    from ops.spark.session import SparkConfig

    if not class_archive.archive_path(SparkConfig().to_spark_conf()).exists():
        sys.exit("no class archive for this install: run .ci/install (or "
                 "python -m ops.operating.train_class_archive) first")
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for round_ in range(args.rounds):  # alternate which arm goes first, so drift favours neither
        for archive in ((True, False) if round_ % 2 == 0 else (False, True)):
            runs[archive].append(_arm(archive))
    medians = {arm: {phase: statistics.median(r[phase] for r in runs[arm]) for phase in PHASES}
               for arm in runs}
    rows = [[phase, medians[False][phase], medians[True][phase],
             medians[True][phase] / medians[False][phase]] for phase in PHASES]
    print_table(f"A run in a fresh process, median of {args.rounds} (s)",
                ["phase", "without archive", "with archive", "ratio"], rows)
    write_results("process_start", {"rounds": args.rounds, "medians": {
        "without": medians[False], "with": medians[True]}, "runs": {
        "without": runs[False], "with": runs[True]}})


if __name__ == "__main__":
    main()
