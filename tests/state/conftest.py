"""Fixtures of the state-engine tests."""

import pytest

from tests.state import crash_pipeline as cp
from tests.state.crash_pipeline import outcome, publish_all


@pytest.fixture(scope="session")
def oracle(spark, tmp_path_factory):
    warehouse = str(tmp_path_factory.mktemp("oracle"))
    pipeline = cp.build()
    publish_all(spark, pipeline, warehouse)
    pipeline.run_once(spark, warehouse)
    return outcome(spark, pipeline, warehouse)


