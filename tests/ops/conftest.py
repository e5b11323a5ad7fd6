"""Fixtures of the ops tests that compare a run with a crash-free one: the oracles of
``tests/ops/runtime/recovery/crash_pipeline.py``'s pipelines (computed once a session, shared by
the recovery tests of ``tests/ops/runtime/recovery/`` and the operations of
``tests/ops/operating/``), their published input, and the child a crash test kills."""

import shutil

import pytest

from tests.ops.runtime.recovery import crash_pipeline as cp
from tests.ops.runtime.recovery.crash_pipeline import outcome, publish_all


@pytest.fixture(scope="session")
def oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build(), str(tmp_path_factory.mktemp("oracle")))


@pytest.fixture(scope="session")
def plain_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_plain(), str(tmp_path_factory.mktemp("plain_oracle")))


@pytest.fixture(scope="session")
def distributed_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_distributed(), str(tmp_path_factory.mktemp("dist_oracle")))


@pytest.fixture(scope="session")
def vectorized_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_vectorized(), str(tmp_path_factory.mktemp("vec_oracle")))


@pytest.fixture(scope="session")
def processor_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_processor(), str(tmp_path_factory.mktemp("tws_oracle")))


@pytest.fixture(scope="session")
def initial_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_processor_initial(), str(tmp_path_factory.mktemp("init_oracle")))


@pytest.fixture(scope="session")
def event_time_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_processor_event_time(),
                       str(tmp_path_factory.mktemp("event_time_oracle")))


@pytest.fixture(scope="session")
def entries_oracle(spark, tmp_path_factory):
    return _crash_free(spark, cp.build_processor_entries(),
                       str(tmp_path_factory.mktemp("entries_oracle")))


@pytest.fixture(scope="session")
def published(spark, tmp_path_factory):
    """``published(pipeline, warehouse)``: ``warehouse`` holds the pipeline's whole input, as
    :func:`publish_all` leaves it. Published once per pipeline into a template warehouse and
    copied from there (Delta tables keep relative paths): publishing the same batches again
    for every crash test cost ~2 s each. The oracles publish for themselves."""
    templates = {}

    def into(pipeline, warehouse: str) -> None:
        if pipeline.name not in templates:
            template = tmp_path_factory.mktemp(f"published_{pipeline.name}") / "warehouse"
            publish_all(spark, pipeline, str(template))
            templates[pipeline.name] = template
        shutil.copytree(templates[pipeline.name], warehouse, dirs_exist_ok=True)

    return into


@pytest.fixture
def crash_child(warm_children, child_env):
    """``crash_child(crash_at=None, pipeline="hooked", run="once", **env)``: run the crash
    pipeline's ``pipeline`` variant (a key of ``cp.BUILDERS``; ``run``: ``once`` or
    ``continuous``) in a child against the test's warehouse, SIGKILLed at protocol step
    ``crash_at``; ``env`` overrides the child's environment. The child is a warm one
    (tests/warm_children.py). Returns its exit code and output, as ``subprocess.run`` does."""

    def run(crash_at=None, pipeline="hooked", run="once", **env):
        env = dict(child_env, CRASH_TEST_PIPELINE=pipeline, CRASH_TEST_RUN=run, **env)
        if crash_at:
            env["LAKESTREAM_CRASH_AT"] = crash_at
        return warm_children.run(cp.__name__, env, spark="distributed" in pipeline)

    return run


def _crash_free(spark, pipeline, warehouse):
    publish_all(spark, pipeline, warehouse)
    pipeline.run_once(spark, warehouse)
    return outcome(spark, pipeline, warehouse)


