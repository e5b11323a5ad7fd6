"""Workload 4: recovery after a crash, against the size of the state; and rebuilding a state
table from its changelog.

Recovery: state seeded with N keys; a child process runs one batch changing 10k keys and is
killed (SIGKILL) after the sink write, before the checkpoint commit. The benchmark then times
recovery alone (``sp.recover``) and the replay of the lost batch, and checks exactly-once: the
sink holds each of the batch's rows once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import peak_memory
from running_sum import changed_keys, seed_state, summing_pipeline, write_batches

import ops as sp

CRASH_STEP = "before_checkpoint_commit"
PIPELINE = "recovering"


def crash_mid_batch(source: str, warehouse: str) -> None:
    """Run the batch in a child process that dies just before its checkpoint commit."""
    env = dict(os.environ, LAKESTREAM_CRASH_AT=CRASH_STEP, LAKESTREAM_SPARK_MASTER="local[2]",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1])]))
    child = subprocess.run([sys.executable, __file__, source, warehouse], env=env,
                           capture_output=True, text=True, timeout=900)
    assert child.returncode == -9, f"the child should have been killed: {child.stderr[-2000:]}"


def recovery(spark, workdir: str, state_keys: int, changed: int) -> dict:
    source, warehouse = f"{workdir}/rec_changes_{state_keys}", f"{workdir}/rec_{state_keys}"
    changed_keys(spark, source, state_keys, changed)
    seed_state(spark, warehouse, PIPELINE, state_keys)
    crash_mid_batch(source, warehouse)
    pipeline = summing_pipeline(source, PIPELINE)
    result: dict = {"state_keys": state_keys, "changed_keys": changed}
    with peak_memory(result, spark):
        started = time.perf_counter()
        sp.recover(spark, pipeline, warehouse)
        result["recover_s"] = time.perf_counter() - started
        started = time.perf_counter()
        report = pipeline.run_once(spark, warehouse)
        result["replay_s"] = time.perf_counter() - started
    out = pipeline.read_sink(spark, "out", warehouse)
    assert report.rows_in == changed and len(out) == changed and out["k"].is_unique, "not exactly once"
    return result


def rebuild(spark, workdir: str, keys: int) -> dict:
    """A state table of ``keys`` keys built in two batches (every key inserted, then a tenth of
    them updated); the table is deleted and rebuilt from its changelog."""
    source, warehouse = f"{workdir}/rebuild_src_{keys}", f"{workdir}/rebuild_{keys}"
    rng = np.random.default_rng(7)
    updates = rng.choice(keys, keys // 10, replace=False).astype(np.int64)
    frames = [pd.DataFrame({"k": np.arange(keys, dtype=np.int64), "x": np.ones(keys, np.int64)}),
              pd.DataFrame({"k": updates, "x": np.full(len(updates), 2, np.int64)})]
    changes = write_batches(spark, source, frames)
    pipeline = (sp.read.from_delta(source, max_versions=1).group_by("k")
                .agg(total=sp.sum_("x")).write.to_table("totals")).named("rebuilt")
    pipeline.run_once(spark, warehouse)
    shutil.rmtree(pipeline.layout(warehouse).table("totals"))
    result: dict = {"keys": keys, "changelog_rows": changes}
    with peak_memory(result, spark):
        started = time.perf_counter()
        rows = pipeline.rebuild_table(spark, "totals", warehouse)
        result["rebuild_s"] = time.perf_counter() - started
    assert rows == keys, (rows, keys)
    table = pipeline.read_sink(spark, "totals", warehouse)
    assert int(table["total"].sum()) == keys + 2 * len(updates)
    return result


if __name__ == "__main__":   # the crashing child
    child_source, child_warehouse = sys.argv[1:3]
    summing_pipeline(child_source, PIPELINE).run_once(sp.spark_session(), child_warehouse)
