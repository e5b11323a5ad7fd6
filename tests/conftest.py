"""One real Spark session (with Delta) for the whole test session; a fresh warehouse per test."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark():
    import ops

    # 3 GiB of heap: the one session serves 230-odd tests, and at the default 1 GiB it ran out
    # of heap near the end of the suite (slowing every test before that in garbage collection)
    session = ops.spark_session(ops.SparkConfig(master="local[2]", shuffle_partitions=2,
                                                extra={"spark.driver.memory": "3g"}))
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _forget_delta_logs(request):
    """After a test that used Spark: drop Delta's cache of table logs and snapshots. Every test
    writes tables of its own, which no later test reads, and the cache kept them all."""
    yield
    if "spark" in request.fixturenames:
        session = request.getfixturevalue("spark")
        session.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@pytest.fixture
def warehouse(tmp_path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def child_env(warehouse):
    """Environment for child processes that run pipelines against the test's warehouse."""
    env = dict(os.environ, LAKESTREAM_WAREHOUSE=warehouse, LAKESTREAM_SPARK_MASTER="local[1]",
               LAKESTREAM_SHUFFLE_PARTITIONS="1", PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    env.pop("LAKESTREAM_CRASH_AT", None)
    return env
