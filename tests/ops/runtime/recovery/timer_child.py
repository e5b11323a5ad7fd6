"""A pipeline whose output comes only from timers, run in a child process by the timer crash
tests (``python -m tests.ops.runtime.recovery.timer_child``; ``TIMER_TEST_MODE=distributed``
for executors).

Each key sums its ``x``; every call sets the key's timer 1 ms after the batch's time. The
batches of one run's backlog are planned together (one processing time), so no timer is due
until the backlog is drained; then the run's batch with no input fires every key's timer once,
and each key reports its total: one sink row per key, whatever the timing.
"""

import os

import pandas as pd

import ops as sp

SCHEMA = {"k": "long", "x": "long"}
INPUT = [[{"k": k, "x": b * 10 + k} for k in (1, 2, 3)] for b in range(2)]


def report_on_timeout(op, md, data):
    if md.timer is not None:
        return pd.DataFrame({"k": [md.key], "total": [sp.get(op, md)], "batch": [md.batch_id]})
    sp.set(op, md, sp.get(op, md) + int(data["x"].sum()))
    sp.set_timer(op, md, at=md.batch_time + 1)
    return None


def build(mode: str = "driver"):
    return (sp.read.from_callback("events", key="k", schema=SCHEMA, max_versions=1)
            .map(report_on_timeout, state=0, name="quiet", timers=True)
            .write.to_delta("out")
            .named(f"timers_{mode}").with_mode(mode))


def expected_totals() -> dict[int, int]:
    return {k: sum(row["x"] for batch in INPUT for row in batch if row["k"] == k) for k in (1, 2, 3)}


if __name__ == "__main__":
    spark = sp.lazy_spark_session()  # as a Dagster step: a JVM only if the run needs one
    report = build(os.environ.get("TIMER_TEST_MODE", "driver")).run_once(spark)
    print(f"DONE checkpoint={report.checkpoint_id} batches={len(report.batches)}", flush=True)
