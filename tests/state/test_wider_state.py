"""A ``_state`` table with typed states' columns (``k__…``, ``v__…``: issue 52's layout) works
for everything that reads or writes it: runs in both modes append to it as before (delta-rs
commits, executors' task files), operations keep the columns, and rows whose key and value
are in typed columns are told apart by them, not lumped together by their null ``key``."""

import dataclasses
import json
import shutil

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import ops as sp
from state import CheckpointLog, delta_io
from state.read.latest import latest_per_key
from tests.state.fixtures import json_state_v1 as v1

TYPED = [pa.field("k__typed", pa.int64()), pa.field("v__typed", pa.float64())]


@pytest.fixture
def warehouses(tmp_path) -> tuple[str, str]:
    """Two copies of the JSON fixture: as written, and widened by typed columns."""
    plain, wide = tmp_path / "plain", tmp_path / "wide"
    shutil.copytree(v1.FOLDER, plain)
    shutil.copytree(v1.FOLDER, wide)
    for pipeline in v1.pipelines().values():
        delta_io.add_columns(pipeline.layout(str(wide)).state, TYPED)
    return str(plain), str(wide)


def state_of(spark, pipeline, warehouse) -> dict:
    rows = sp.read_state(spark, pipeline, "state", warehouse=warehouse)
    return {json.dumps(key): value for key, value in zip(rows["key"], rows["value"])}


def last_commit(path: str) -> dict:
    return DeltaTable(path).history(1)[0]


@pytest.mark.parametrize("mode", ["driver", "distributed"])
def test_runs_carry_on_on_a_widened_table_as_on_the_plain_one(spark, warehouses, mode):
    plain, wide = warehouses
    pipeline = v1.pipelines()["int_sums"]
    for warehouse in warehouses:
        pipeline.publish(spark, v1.NEXT, warehouse)
        pipeline.run_once(spark, warehouse, mode=mode)
    assert state_of(spark, pipeline, wide) == state_of(spark, pipeline, plain) == \
        {"1": 14, "2": 6, "3": 25}
    # still written here (delta-rs: a commit, or the executors' files), not left to Spark
    commit = last_commit(pipeline.layout(wide).state)
    assert "clientVersion" in commit and commit["clientVersion"].startswith("delta-rs"), commit
    schema = DeltaTable(pipeline.layout(wide).state).schema().to_arrow()
    assert {"k__typed", "v__typed"} <= set(schema.names)


def test_operations_on_a_widened_table_keep_its_columns_and_its_state(spark, warehouses, tmp_path):
    plain, wide = warehouses
    pipeline = v1.pipelines()["windows"]
    for warehouse in warehouses:
        pipeline.publish(spark, v1.NEXT, warehouse)
        pipeline.run_once(spark, warehouse)
        sp.reset_to_checkpoint(spark, pipeline, 2, warehouse=warehouse)
        sp.compact(spark, pipeline, warehouse=warehouse)
    assert state_of(spark, pipeline, wide) == state_of(spark, pipeline, plain)
    assert "k__typed" in spark.read.format("delta").load(pipeline.layout(wide).state).columns

    sp.export_state(spark, pipeline, str(tmp_path / "export"), warehouse=wide)
    moved = str(tmp_path / "moved")
    sp.import_state(spark, pipeline, str(tmp_path / "export"), warehouse=moved)
    assert state_of(spark, pipeline, moved) == state_of(spark, pipeline, plain)


def _typed_rows(keys: list[int], values: list[float | None], deleted: list[bool]) -> pd.DataFrame:
    """Rows of a typed state ``typed``, as typed storage writes them: no key text, the key
    and value in their columns, each key's group given."""
    return pd.DataFrame({
        "operator": "typed", "key": None, "value": None, "deleted": deleted,
        "key_group": pd.array([k % 7 for k in keys], dtype="Int32"),
        "k__typed": pd.array(keys, dtype="Int64"), "v__typed": pd.array(values, dtype="Float64")})


def test_typed_rows_are_keys_of_their_own_and_a_reset_puts_them_back(spark, warehouses):
    _, wide = warehouses
    pipeline = v1.pipelines()["int_sums"]
    layout = pipeline.layout(wide)
    log = CheckpointLog(spark, layout)
    # checkpoint 3: keys 1 and 2 of the typed state; checkpoint 4: 2 changed, 1 deleted, 5 new
    for rows in [_typed_rows([1, 2], [1.5, 2.5], [False, False]),
                 _typed_rows([2, 1, 5], [20.5, None, 5.0], [False, True, False])]:
        latest = log.latest()
        log.commit(dataclasses.replace(latest, checkpoint_id=latest.checkpoint_id + 1,
                                       batch_id=latest.batch_id + 1), rows)
    live = latest_per_key(spark.read.format("delta").load(layout.state)
                          .where("operator = 'typed'")).where("not deleted").toPandas()
    assert sorted(zip(live["k__typed"], live["v__typed"])) == [(2, 20.5), (5, 5.0)]
    assert set(live["key_group"]) == {2, 5}

    sp.reset_to_checkpoint(spark, pipeline, 3, warehouse=wide)
    live = latest_per_key(spark.read.format("delta").load(layout.state)
                          .where("operator = 'typed'")).where("not deleted").toPandas()
    assert sorted(zip(live["k__typed"], live["v__typed"])) == [(1, 1.5), (2, 2.5)]
    assert state_of(spark, pipeline, wide) == {"1": 4, "2": 6, "3": 5}  # the JSON state too
