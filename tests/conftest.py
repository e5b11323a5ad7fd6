"""One real Spark session (with Delta) per pytest worker (``bash .ci/test`` runs two); a fresh
warehouse per test."""

import os
from pathlib import Path

import pytest

from tests.spark_settings import ROOT, SMALL_DATA_CONF, child_environment

#: What ``bash .ci/test --fast`` (the inner loop's tier) leaves out, besides the crash tests
#: marked ``slow`` and the tests listed in ``tests/full_tier.txt``: the tests that start a whole
#: system of their own (a standalone cluster, the Kafka broker's end-to-end runs, a browser,
#: ``dg dev`` and ``dagster`` processes) or run every protocol step against S3. Every package
#: keeps its unit and end-to-end tests in the fast tier.
FULL_TIER_ONLY = ("tests/cluster/", "tests/kafka/", "tests/objectstore/",
                  "tests/assets/test_warm_launcher.py",
                  "tests/analytics/test_page.py", "tests/dagster_project/test_ui.py",
                  "tests/dagster_project/test_continuous_job.py",
                  "tests/dagster_project/test_operation_jobs.py",
                  "tests/dagster_project/test_instance.py")


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="the fast tier: leave out the crash tests and whole-system tests "
                          "(tests/conftest.py: FULL_TIER_ONLY)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--fast"):
        return
    # and the tests a full run measured over a few seconds (tests/tiers.py writes the list)
    measured = {line for line in (ROOT / "tests" / "full_tier.txt").read_text().splitlines()
                if line and not line.startswith("#")}
    fast, left_out = [], []
    for item in items:
        path = Path(item.fspath).relative_to(ROOT).as_posix()
        full_only = path.startswith(FULL_TIER_ONLY) or item.nodeid in measured
        (left_out if full_only or item.get_closest_marker("slow") else fast).append(item)
    config.hook.pytest_deselected(items=left_out)
    items[:] = fast


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """One local S3 server for the test session (``ops.devservers.s3_server``), with bucket ``lake``.
    Its standard AWS environment is set for the whole session, before Spark starts, so the
    Spark session, delta-rs and child processes all reach it as they would reach AWS."""
    from ops.devservers.s3_server import LocalS3

    server = LocalS3.start(tmp_path_factory.mktemp("s3"))
    server.create_bucket(S3_BUCKET)
    saved = {key: os.environ.get(key) for key in server.env()}
    os.environ.update(server.env())
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


@pytest.fixture(scope="session")
def spark(s3):
    import ops

    # 3 GiB of heap: the one session serves 230-odd tests, and at the default 1 GiB it ran out
    # of heap near the end of the suite (slowing every test before that in garbage collection)
    session = ops.spark_session(ops.SparkConfig(master="local[2]", shuffle_partitions=2,
                                                extra={"spark.driver.memory": "3g",
                                                       **SMALL_DATA_CONF}))
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


S3_BUCKET = "lake"


@pytest.fixture
def s3_warehouse(s3, tmp_path) -> str:
    """A warehouse of the test's own on the session's S3 server (``s3a://lake/<test>-<n>``)."""
    return f"s3a://{S3_BUCKET}/{tmp_path.parent.name}-{tmp_path.name}/warehouse"


@pytest.fixture(scope="session")
def warm_children(tmp_path_factory):
    """Children for ``python -m <module>`` whose Spark session is up before a test asks for
    one (tests/warm_children.py): the crash tests' children start while the test before works."""
    from tests.warm_children import WarmChildren

    children = WarmChildren(tmp_path_factory.mktemp("children"))
    yield children
    children.close()


@pytest.fixture
def child_env(warehouse):
    """Environment for child processes that run pipelines against the test's warehouse."""
    return child_environment(warehouse)
