"""A pipeline run continuously in a child process (``python -m ...``), for the tests that stop
it with a signal. It prints a line when each checkpoint commits and when a batch holding the
record ``x == -1`` starts (that batch then takes two seconds, so a signal lands mid-batch)."""

import os
import sys
import time

import ops as sp

SCHEMA = {"k": "long", "x": "long"}
SLOW = -1


def running_sum(op, md, data):
    if (data["x"] == SLOW).any():
        print(f"SLOW BATCH {md.batch_id}", flush=True)
        time.sleep(2)
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def build():
    return ((sp.read.from_callback("events", key="k", schema=SCHEMA)
             .map(running_sum, state=0)
             .write.to_delta("out"))
            .named("live"))


if __name__ == "__main__":
    spark = sp.lazy_spark_session()  # as a Dagster step: a JVM only if the run needs one

    def checkpointed(report: sp.CheckpointReport) -> None:
        print(f"CHECKPOINT {report.checkpoint_id} batch={report.batch_id} "
              f"rows={report.rows_in}", flush=True)

    stop = sp.StopSignal()
    print("READY", flush=True)
    report = build().run_continuously(spark, trigger="100ms", stop=stop,
                                      max_seconds=float(os.environ.get("LIVE_SECONDS", "120")),
                                      checkpointed=checkpointed)
    print(f"STOPPED ({stop.reason}) checkpoint={report.checkpoint_id} "
          f"batch={report.last_batch_id} rows={report.rows_in}", flush=True)
    sys.exit(0)
