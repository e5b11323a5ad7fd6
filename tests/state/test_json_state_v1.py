"""A warehouse written before typed state (``fixtures/json_state_v1``, every key and value JSON
text) loads today: its state reads back as the same values a run of today writes, and runs carry
on from its checkpoints."""

import shutil

import pytest

import ops as sp
from state import CheckpointLog
from tests.state.fixtures import json_state_v1 as v1


@pytest.fixture
def old_warehouse(tmp_path) -> str:
    copy = tmp_path / "old"
    shutil.copytree(v1.FOLDER, copy)
    return str(copy)


@pytest.fixture(scope="module")
def made_today(spark, tmp_path_factory) -> str:
    """The same pipelines on the same batches, written by today's code (once: twelve runs)."""
    made = str(tmp_path_factory.mktemp("json_state_today") / "new")
    v1.make(spark, made)
    return made


@pytest.fixture
def new_warehouse(made_today, tmp_path) -> str:
    """A copy of :func:`made_today` of the test's own (a test may run on from it)."""
    copy = tmp_path / "new"
    shutil.copytree(made_today, copy)
    return str(copy)


def state_of(spark, pipeline, warehouse, operator="state") -> dict:
    rows = sp.read_state(spark, pipeline, operator, warehouse=warehouse)
    return {_hashable(key): value for key, value in zip(rows["key"], rows["value"])}


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


def test_the_fixture_holds_two_checkpoints_of_json_text(spark, old_warehouse):
    for pipeline in v1.pipelines().values():
        layout = pipeline.layout(old_warehouse)
        assert CheckpointLog(spark, layout).latest().batch_id == 2, pipeline.name
        values = spark.read.format("delta").load(layout.state).where("operator = 'state'")
        assert dict(values.dtypes)["value"] == "string"
    sums = v1.pipelines()["int_sums"]
    assert state_of(spark, sums, old_warehouse) == {1: 4, 2: 6, 3: 5}


@pytest.mark.parametrize("name", ["int_sums", "float_sums", "windows", "unkeyed", "pickled"])
def test_old_state_reads_as_what_todays_runs_write(spark, old_warehouse, new_warehouse, name):
    pipeline = v1.pipelines()[name]
    assert state_of(spark, pipeline, old_warehouse) == state_of(spark, pipeline, new_warehouse)


def test_runs_carry_on_from_old_checkpoints_as_from_new_ones(spark, old_warehouse, new_warehouse):
    for pipeline in v1.pipelines().values():
        for warehouse in (old_warehouse, new_warehouse):
            pipeline.publish(spark, v1.NEXT, warehouse)
            assert pipeline.run_once(spark, warehouse).last_batch_id == 3, pipeline.name
        if pipeline.name != "timers":  # its deadlines are the runs' own processing times
            assert state_of(spark, pipeline, old_warehouse) == \
                state_of(spark, pipeline, new_warehouse), pipeline.name
        assert set(state_of(spark, pipeline, old_warehouse)) == \
            set(state_of(spark, pipeline, new_warehouse)), pipeline.name
    sums = v1.pipelines()["int_sums"]
    assert state_of(spark, sums, old_warehouse) == {1: 14, 2: 6, 3: 25}
