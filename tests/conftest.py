"""One real Spark session (with Delta) for the whole test session; a fresh warehouse per test."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark():
    import ops

    session = ops.spark_session(ops.SparkConfig(master="local[2]", shuffle_partitions=2))
    yield session
    session.stop()


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
