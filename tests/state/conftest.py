"""Fixtures of the state-engine tests."""

import pytest

from tests.state import crash_pipeline as cp
from tests.state.crash_pipeline import outcome, publish_all


@pytest.fixture(scope="session")
def oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build(), str(tmp_path_factory.mktemp("oracle")))


@pytest.fixture(scope="session")
def plain_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_plain(), str(tmp_path_factory.mktemp("plain_oracle")))


@pytest.fixture(scope="session")
def distributed_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_distributed(), str(tmp_path_factory.mktemp("dist_oracle")))


def _crash_free(spark, pipeline, warehouse):
    publish_all(spark, pipeline, warehouse)
    pipeline.run_once(spark, warehouse)
    return outcome(spark, pipeline, warehouse)


