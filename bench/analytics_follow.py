"""How one step of following a changelog grows with the table's commits and files (issue 54).

A changelog-shaped Delta table gets N commits of one small file each (made cheaply: one Parquet
file written by pyarrow per version, the first commit by delta-rs and the others' commit files
copied from it, one log checkpoint by delta-rs at the end: a delta-rs commit costs time growing
with the table, 25 ms each at 100 commits and 60 ms at 300 with its checkpoints; the commits
timed below are delta-rs's own, with the hooks lakestream's tables have); then, per N, the median time of:

- *idle poll*: ``DeltaFiles.commits()`` when no commit was made (what every poll costs: one
  each 5 ms on a local disk);
- *one commit*: ``LiveTable.follow()`` right after one more commit (the poll that finds a batch);
- *open*: ``LiveTable(path, keys)`` (a manager's start: the whole changelog read).

Bounded: N in ``--commits`` (default 10, 1000, 10000), ``--repeats`` timings each. Never in CI.

    .venv/bin/python bench/analytics_follow.py [--commits 10 1000 10000 --repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, PostCommitHookProperties
from deltalake.transaction import AddAction

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analytics.delta_files import DeltaFiles  # noqa: E402
from analytics.live import LiveTable  # noqa: E402

SCHEMA = pa.schema([("sym", pa.string()), ("cpu", pa.float64()), ("_batch_id", pa.int64()),
                    ("_row", pa.int64()), ("_change", pa.string()), ("_old", pa.string())])


# Made quickly: no checkpoint or log cleanup per commit (a delta-rs commit with them costs time
# growing with the table: 25 ms each at 100 commits, 60 ms at 300); one checkpoint at the end.
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def _rows(batch: int, syms: int = 20) -> pa.Table:
    return pa.table({"sym": [f"s{n}" for n in range(syms)], "cpu": [float(batch)] * syms,
                     "_batch_id": [batch] * syms, "_row": list(range(syms)),
                     "_change": ["update"] * syms, "_old": [None] * syms}, schema=SCHEMA)


def commit_batch(path: str, table: DeltaTable, batch: int, quick: bool = False) -> None:
    """One changelog commit of batch ``batch``: a Parquet file and its add action."""
    name = f"part-{batch:08d}-{uuid.uuid4().hex[:8]}.parquet"
    rows = _rows(batch)
    pq.write_table(rows, os.path.join(path, name))
    size = os.path.getsize(os.path.join(path, name))
    table.create_write_transaction(
        [AddAction(name, size, {}, int(time.time() * 1000), True, None)], mode="append",
        schema=SCHEMA, post_commithook_properties=_NO_HOOKS if quick else None)


def make_table(path: str, commits: int) -> DeltaTable:
    """A table of ``commits`` versions: created and first appended to by delta-rs, the later
    appends' commit files written as delta-rs wrote the first (an add action and commit info),
    then one log checkpoint by delta-rs, so opening it does not replay every commit."""
    DeltaTable.create(path, SCHEMA, configuration={"delta.checkpointInterval": "10"})
    table = DeltaTable(path)
    if commits > 1:
        commit_batch(path, table, 1, quick=True)
    log = os.path.join(path, "_delta_log")
    with open(os.path.join(log, f"{1:020d}.json")) as first:
        actions = [json.loads(line) for line in first if line.strip()]
    for batch in range(2, commits):  # bounded: one file and one commit file per version
        name = f"part-{batch:08d}-{uuid.uuid4().hex[:8]}.parquet"
        pq.write_table(_rows(batch), os.path.join(path, name))
        now = int(time.time() * 1000)
        for action in actions:
            if "add" in action:
                action["add"].update(path=name, size=os.path.getsize(os.path.join(path, name)),
                                     modificationTime=now)
            elif "commitInfo" in action:
                action["commitInfo"]["timestamp"] = now
        with open(os.path.join(log, f"{batch:020d}.json"), "x") as commit:
            commit.write("\n".join(json.dumps(action) for action in actions) + "\n")
    table = DeltaTable(path)
    table.create_checkpoint()  # as lakestream's every tenth version would have
    return table


def _median_ms(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(f"{'commits':>8} {'make s':>7} {'idle poll ms':>13} {'one commit ms':>14} {'open ms':>8}")
    for commits in args.commits:
        path = tempfile.mkdtemp(prefix="lakestream-follow-")
        started = time.perf_counter()
        table = make_table(path, commits)
        made = time.perf_counter() - started
        live = LiveTable(path, ("sym",))
        files = DeltaFiles(path)
        files.snapshot()
        idle = _median_ms(files.commits, args.repeats)
        batch = [commits]
        times = []
        for _ in range(args.repeats):  # bounded: one commit made, then followed, per repeat
            commit_batch(path, table, batch[0])
            batch[0] += 1
            started = time.perf_counter()
            found = live.follow()
            times.append(1000 * (time.perf_counter() - started))
            assert [b for b, _ in found.batches] == [batch[0] - 1], found.batches
        opening = _median_ms(lambda at=path: LiveTable(at, ("sym",)), max(3, args.repeats // 5))
        print(f"{commits:>8} {made:>7.1f} {idle:>13.2f} {statistics.median(times):>14.2f} "
              f"{opening:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
