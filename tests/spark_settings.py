"""Spark and JVM settings for the suite (its data is small and most of its JVMs live briefly),
and the environment its child processes run pipelines in."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Spark settings for the suite's small data, in its session and its children's. A test's
#: batches are a few rows: compiling each new query to Java (whole-stage code generation, then
#: Janino) costs more than evaluating it row by row, and the suite runs hundreds of query
#: shapes once each (measured: tests/ops/sql and sources 4:33 -> 3:42). What is computed is the
#: same either way: lakestream's code never depends on how Spark evaluates a plan.
SMALL_DATA_CONF = {"spark.sql.codegen.wholeStage": "false",
                   "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

#: JVM options for the suite's short-lived JVMs (a child's driver, a standalone cluster's): they
#: live for a few small batches, where C2's optimising never pays back and, on two cores,
#: competes with the work (a six-batch crash child: 15.8 -> 12.8 s). The suite's own session
#: lives for the whole run and was 40% slower so: it keeps the default.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def child_environment(warehouse: str) -> dict[str, str]:
    """The environment of a child process that runs pipelines against ``warehouse``: this
    interpreter and project, one local core, and the settings above."""
    env = dict(os.environ, LAKESTREAM_WAREHOUSE=warehouse, LAKESTREAM_SPARK_MASTER="local[1]",
               LAKESTREAM_SHUFFLE_PARTITIONS="1", PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable,
               # the driver JVM takes SPARK_SUBMIT_OPTS (spark-class), silently
               SPARK_SUBMIT_OPTS=SHORT_LIVED_JVM,
               # and the suite's small-data settings, which PySpark hands to spark-submit
               PYSPARK_SUBMIT_ARGS=" ".join(f"--conf {key}={value}"
                                            for key, value in SMALL_DATA_CONF.items()) + " pyspark-shell")
    # not a child's to inherit: a crash point is the test's to give, and pytest's name of the
    # running test would make every test's environment another (so no warm child would fit it)
    for variable in ("LAKESTREAM_CRASH_AT", "PYTEST_CURRENT_TEST"):
        env.pop(variable, None)
    return env
