"""Make the driver's class archive (:mod:`ops.spark.class_archive`) with a training run.

``python -m ops.operating.train_class_archive`` starts Spark with its JVM told to write the
classes it loaded when it exits, runs a small pipeline the way lakestream runs every pipeline
(keyed state, a Delta sink, checkpoints, a second run that recovers; in driver mode and on
executors), stops the JVM and puts the archive where every later session finds it. The install
step runs it; when the archive for today's JVM and jars exists already, it does nothing.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
from pyspark import SparkContext
from pyspark.sql import SparkSession

from .. import api
from ..readers import read
from ..spark import class_archive
from ..spark.session import SparkConfig, spark_session
from .inspection import read_state

log = logging.getLogger(__name__)

_SCHEMA = {"k": "long", "x": "double"}
#: Bounded: a JVM that has not written its archive and exited by then is not waited for.
_EXIT_TIMEOUT_S = 180


def train(config: SparkConfig | None = None) -> Path | None:
    """Make the archive for ``config``'s driver unless it is there; return its path (``None``
    when the JVM wrote none). Must run in a process with no Spark session yet: the JVM it starts
    is the one trained, and is stopped at the end."""
    config = config or SparkConfig(master="local[2]", shuffle_partitions=2)
    target = class_archive.archive_path(config.to_spark_conf())
    if target.exists():
        return target
    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("train() starts a Spark JVM of its own: call it in a fresh process")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    os.environ["LAKESTREAM_CLASS_ARCHIVE"] = "off"  # the JVM cannot read one while it writes one
    options = {"spark.driver.extraJavaOptions": class_archive.training_options(partial)}
    spark = spark_session(SparkConfig(config.master, config.app_name, config.shuffle_partitions,
                                      {**config.extra, **options}))
    with tempfile.TemporaryDirectory() as warehouse:
        for mode in ("driver", "distributed"):
            _run_twice(spark, warehouse, mode)
    _stop_jvm(spark)
    if not partial.exists():
        return None
    partial.replace(target)  # whole or not at all: a session never maps half an archive
    for stale in target.parent.glob("spark-driver-*"):  # an earlier install's, 200 MB each
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def _running_sum(op: api.Op, md: api.Metadata, data: pd.DataFrame) -> pd.DataFrame:
    total = api.get(op, md) + data["x"].cumsum()
    api.set(op, md, float(total.iloc[-1]))
    return data.assign(total=total)


def _run_twice(spark: SparkSession, warehouse: str, mode: str) -> None:
    """Two batches, each run by a run of its own, so the second recovers from a checkpoint."""
    pipeline = (read.from_callback("events", key="k", schema=_SCHEMA)
                .map(_running_sum, state=0.0, name="running_sum")
                .write.to_delta("totals")).named(f"class_archive_{mode}").with_mode(mode)
    for batch in range(2):
        pipeline.publish(spark, [{"k": k, "x": float(batch)} for k in range(20)], warehouse)
        pipeline.run_once(spark, warehouse)
    pipeline.read_sink(spark, "totals", warehouse)
    read_state(spark, pipeline, "running_sum", warehouse=warehouse)


def _stop_jvm(spark: SparkSession) -> None:
    """Stop Spark and wait until its JVM has exited, which is when it writes the archive: it
    exits when its standard input closes."""
    gateway = SparkContext._gateway
    process: subprocess.Popen = gateway.proc  # type: ignore[union-attr]
    spark.stop()
    gateway.shutdown()  # type: ignore[union-attr]
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=_EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("the Spark JVM did not exit within %d s: no class archive", _EXIT_TIMEOUT_S)
        process.kill()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="    %(message)s")  # not each batch's line
    made = train()
    print(f"    the driver's class archive: {made}" if made else
          "    the driver's class archive: not made (the JVM wrote none); Spark starts without it")
