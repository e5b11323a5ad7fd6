"""What this machine allows for the keyed running sum, and lakestream beside it.

The limit is the workload as a minimal pandas + pyarrow program, with no exactly-once, no Delta
and no Spark: per batch it reads the batch's events (Parquet), looks up the batch's keys' prior
totals in the totals files of the batches before (Parquet, newest per key), computes the
running sums, and writes the output and the changed totals as Parquet. Nothing a stream
processor must do more is in it: no plan, no commit, no log, no idempotence, no checkpoint.

Side by side in one run (1M events per batch over a key range of 1M, so ~630k distinct keys per
batch; a first batch untimed in each configuration, as in ``scale.py``):

- ``limit``: the program above, batches 2..N;
- lakestream ``drained``: one run from an empty state through batches 1..N, so from batch 2 on
  it holds its keys from the batch before, in the same run; timed by batches 2..N (their own
  seconds) and as a whole run (every batch, wall clock);
- lakestream ``cold``: after a one-batch run (untimed: Spark's start, batch 1), one run per
  batch (as sensor-started runs are), each reading its keys' state from ``_state`` first;
  timed by whole runs (wall clock) and by their batches' own seconds;

in driver and distributed mode, with ratios against the limit, cold against drained (whole
runs against the whole drained run, batches against batches 2..N), and distributed against
driver. (Until issue 52 the drained arm was a "warm" one that started after a one-batch run,
so its first timed batch read every key from ``_state``: a cold run of two batches.)
``--before DIR`` adds the same arms run by another checkout (an earlier commit, say, made with
``git worktree add DIR <commit>``), with this checkout's virtual env: before and after, side by
side. ``--typed`` adds each mode's arms with the sum's state stored in typed columns
(``state_type=int``), with typed against JSON storage.

    .venv/bin/python bench/limit.py                          # 1M events per batch, 3 batches
    .venv/bin/python bench/limit.py --size 100000 --modes driver
    .venv/bin/python bench/limit.py --modes driver --typed   # typed against JSON storage
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import print_table, write_results  # noqa: E402


def limit_batch(events_file: Path, totals: list[Path], out: Path, batch: int) -> int:
    """One batch of the running sum as plain pandas + pyarrow; returns the events read."""
    events = pq.read_table(events_file).to_pandas()
    keys = pa.array(events["k"].unique())
    prior = pd.DataFrame({"k": np.array([], np.int64), "total": np.array([], np.int64)})
    if totals:  # newest total per key among the earlier batches' files
        stored = pa.concat_tables([pq.read_table(path) for path in totals])
        stored = stored.filter(pc.is_in(stored["k"], value_set=keys)).to_pandas()
        prior = stored.drop_duplicates("k", keep="last")
    before = events["k"].map(prior.set_index("k")["total"]).fillna(0).astype(np.int64)
    running = events.groupby("k", sort=False)["x"].cumsum() + before
    output = events.assign(total=running)
    pq.write_table(pa.Table.from_pandas(output, preserve_index=False), out / f"output_{batch}.parquet")
    changed = output.drop_duplicates("k", keep="last")[["k", "total"]]
    totals_file = out / f"totals_{batch}.parquet"
    pq.write_table(pa.Table.from_pandas(changed, preserve_index=False), totals_file)
    totals.append(totals_file)
    return len(events)


def limit_run(batch_files: list[Path], out: Path) -> dict:
    """The limit over ``batch_files``: the first batch untimed, then the others."""
    out.mkdir(parents=True, exist_ok=True)
    totals: list[Path] = []
    limit_batch(batch_files[0], totals, out, 0)
    started = time.perf_counter()
    events = sum(limit_batch(path, totals, out, number)
                 for number, path in enumerate(batch_files[1:], start=1))
    return {"events_per_s": events / (time.perf_counter() - started), "events": events}


def run_checkout(checkout: Path, config: dict) -> dict:
    """``scale.py``'s child for ``config``, run by the lakestream of ``checkout``."""
    if config["temperature"] == "drained" and '"drained"' not in (
            checkout / "bench" / "scale.py").read_text():
        # its child would take the unknown arm for a cold one and say nothing
        raise SystemExit(f"--before {checkout}: its bench/scale.py has no drained arm (added with "
                         "issue 52); copy this checkout's bench/scale.py into it first")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(checkout), str(checkout / "bench")]))
    done = subprocess.run([sys.executable, str(checkout / "bench" / "scale.py"), "--child",
                           json.dumps(config)], env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{config['name']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def export_batches(source: str, out: Path) -> list[Path]:
    """Each commit of the Delta table ``source`` as one Parquet file (the limit's input)."""
    from deltalake import DeltaTable
    table = DeltaTable(source)
    files = []
    for version in range(table.version() + 1):
        rows = pa.table(table.load_cdf(starting_version=version, ending_version=version).read_all())
        path = out / f"batch_{version}.parquet"
        pq.write_table(rows.select(["k", "x", "seq"]).sort_by("seq"), path)
        files.append(path)
    return files


def _ratios(speed: dict, modes: list[str]) -> list[dict]:
    """Cold against drained, per mode, and distributed against driver, per arm: by batches
    (``events_per_s``) and by whole runs."""
    def row(arm, above, below):
        return {"arm": arm, "events_per_s": above["batches"] / below["batches"],
                "whole_runs_events_per_s": above["runs"] / below["runs"]}
    rows = [row(f"{mode}: cold / drained", speed[(mode, "cold")], speed[(mode, "drained")])
            for mode in modes]
    if {"driver", "distributed"} <= set(modes):
        rows += [row(f"distributed / driver, {arm}", speed[("distributed", arm)],
                     speed[("driver", arm)]) for arm in ("drained", "cold")]
    for mode in ("driver", "distributed"):
        if {mode, f"{mode} typed"} <= set(modes):
            rows += [row(f"typed / json storage, {mode} {arm}", speed[(f"{mode} typed", arm)],
                         speed[(mode, arm)]) for arm in ("drained", "cold")]
    if {"driver typed", "distributed typed"} <= set(modes):
        rows += [row(f"typed: distributed / driver, {arm}", speed[("distributed typed", arm)],
                     speed[("driver typed", arm)]) for arm in ("drained", "cold")]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--modes", default="driver,distributed")
    parser.add_argument("--before", help="another checkout whose lakestream runs the same arms")
    parser.add_argument("--typed", action="store_true",
                        help="also each mode's arms with the state stored typed (state_type=int)")
    args = parser.parse_args()
    from scale import run_child, write_input

    import ops as sp
    workdir = Path(tempfile.mkdtemp(prefix="lakestream-limit-"))
    source = str(workdir / "input")
    spark = sp.spark_session(sp.SparkConfig(master="local[2]", shuffle_partitions=8))
    write_input(spark, source, args.size, args.batches)
    spark.stop()
    batch_files = export_batches(source, workdir)
    limit = limit_run(batch_files, workdir / "limit")
    rows = [{"arm": "limit (pandas + pyarrow)", "events_per_s": limit["events_per_s"]}]
    print(json.dumps(rows[-1]), flush=True)
    speed = {}
    checkouts = [("", None)] + ([("before: ", Path(args.before).resolve())] if args.before else [])
    modes = args.modes.split(",")
    modes += [f"{mode} typed" for mode in modes] if args.typed else []
    for (label, checkout), arm_mode, temperature in itertools.product(
            checkouts, modes, ("drained", "cold")):
        mode, workload = arm_mode.split(" ")[0], "vectorized_typed" if "typed" in arm_mode else "vectorized"
        name = f"limit_{arm_mode.replace(' ', '_')}_{temperature}{'_before' if checkout else ''}"
        config = {"master": "local[2]", "partitions": 8, "source": source,
                  "workload": workload, "mode": mode, "name": name, "batches": args.batches,
                  "temperature": temperature, "warehouse": str(workdir / name)}
        got = run_child(config) if checkout is None else run_checkout(checkout, config)
        by_batches, by_runs = got["batches_events_per_s"], got["events_per_s"]
        if checkout is None:
            speed[(arm_mode, temperature)] = {"batches": by_batches, "runs": by_runs}
        rows.append({"arm": f"{label}lakestream {arm_mode} {temperature}",
                     "events_per_s": by_batches, "x limit": by_batches / limit["events_per_s"],
                     "whole_runs_events_per_s": by_runs, "batch_s": got["batch_s"],
                     "checkpoint_s": got["checkpoint_s"], "driver_rss_mb": got["driver_rss_mb"]})
        print(json.dumps(rows[-1]), flush=True)
    rows.extend(_ratios(speed, modes))
    header = list(dict.fromkeys(key for row in rows for key in row))
    print_table(f"running sum, {args.size:,} events per batch, local[2]", header,
                [[row.get(key, "") for key in header] for row in rows])
    write_results(f"limit_{args.size}_{args.modes.replace(',', '-')}", {"rows": rows})


if __name__ == "__main__":
    main()
