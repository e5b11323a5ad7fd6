"""A state type inferred from ``state=`` when none is declared (issue 52, S7): a new keyed map
stores its state typed as its ``state=`` value is; ``None``, ``state_type="json"``, timers,
and state already stored as text stay JSON; a value that does not fit stops the batch naming
where the type came from, and ``state_type="json"`` with ``sp.migrate`` turns it back to
text; driver and distributed modes store the same. :func:`ops.runtime.storage.state_types`'s
rules without Spark first."""

import shutil

import pandas as pd
import pytest
from deltalake import DeltaTable

import ops as sp
from ops.runtime.storage import state_types
from state import Checkpoint, CheckpointLog, EncodingError, PipelineChangedError
from tests.state.fixtures import json_state_v1 as v1

SCHEMA = {"k": "long", "x": "long", "tag": "string"}


def add_x(op, md, data):
    sp.set(op, md, sp.get(op, md) + data["x"].sum().item())
    return data


def add_half_x(op, md, data):
    sp.set(op, md, sp.get(op, md) + data["x"].sum().item() / 2)
    return data


def add_x_halving_odd(op, md, data):
    total = sp.get(op, md) + data["x"].sum().item()
    sp.set(op, md, total if total % 2 == 0 else total / 2)  # an odd total: a float
    return data


def count_tags(op, md, data):
    seen = sp.get(op, md)
    sp.set(op, md, {"n": seen["n"] + len(data), "last": str(data["tag"].iloc[-1])})
    return data


def keep_last(op, md, data):
    sp.set(op, md, [int(data["x"].iloc[-1])])
    return data


def remind(op, md, data):
    if md.timer is None:
        sp.set(op, md, sp.get(op, md) + len(data))
        sp.set_timer(op, md, after="1h")
    return data


def _events(key="k", schema=None):
    return sp.read.from_callback("in", key=key, schema=schema or SCHEMA, max_versions=1)


def _sums(name, fn=add_x, **declared):
    return (_events().map(fn, state=0, name="total", **declared).write.to_delta("out")
            .named(name))


def stored(pipeline, warehouse, name):
    """The rows of state ``name`` in ``_state``, and the table's column types."""
    table = DeltaTable(pipeline.layout(warehouse).state)
    types = {field.name: field.type.type for field in table.schema().fields}
    return table.to_pyarrow_table(filters=[("operator", "=", name)]), types


def _checkpoint(operators):
    return Checkpoint(checkpoint_id=1, batch_id=1, operators=operators)


@pytest.fixture
def fixture_copy(tmp_path) -> str:
    shutil.copytree(v1.FOLDER, tmp_path / "warehouse")
    return str(tmp_path / "warehouse")


def test_which_states_a_run_types_without_a_declaration():
    typed = _sums("p")
    assert state_types(typed, "/w/_state", None).origin("total") == \
        "state_type 'int64' inferred from state=0"
    text = {"operator": "total", "role": "values"}
    for last in (_checkpoint(None), _checkpoint({"total": text})):  # stored as text: kept
        assert state_types(typed, "/w/_state", last).types == {}
    int64 = {**text, "storage": {"form": "typed", "type": "int64"}}
    assert state_types(typed, "/w/_state", _checkpoint({"total": int64})).of("total") is not None
    assert state_types(typed, "/w/_state", _checkpoint({"other": text})).of("total") is not None
    never = [
        _sums("p", state_type="json"),
        _events().map(add_x, state=0, name="total", codec="pickle").write.to_delta("out"),
        _events().map(remind, state=0, name="total", timers=True).write.to_delta("out"),
        _events(schema={"x": "long"}).map(add_x, state=0, name="total").write.to_delta("out"),
        _events(key=None).map(add_x, state=0, name="total").write.to_delta("out"),
        _events().map(add_x, state=0, name="total").map(remind, state=0, name="later",
                                                        timers=True).write.to_delta("out"),
        _events(schema={**SCHEMA, "ts": "timestamp"}).map(add_x, state=0, name="total")
        .group_by("k").window(sp.tumbling("ts", "1min")).agg(n=sp.count()).write.to_table("out"),
    ]
    for pipeline in never:  # declared json, pickled, timers (its own or beside), key of no
        assert state_types(pipeline, "/w/_state", None).types == {}  # declared type, unkeyed
    assert state_types(typed, "hdfs://nn/w/_state", None).types == {}  # delta-rs cannot write


def test_a_new_pipeline_stores_each_state_typed_as_its_state_value_is(spark, warehouse):
    pipeline = (_events()
                .map(add_x, state=0, name="ints")
                .map(add_half_x, state=0.0, name="floats")
                .map(count_tags, state={"n": 0, "last": ""}, name="record")
                .map(keep_last, state=None, name="nothing")
                .map(add_x, state=0, name="declined", state_type="json")
                .write.to_delta("out")).named("inferred")
    pipeline.publish(spark, pd.DataFrame({"k": [1, 2, 1], "x": [3, 4, 5], "tag": list("abc")}),
                     warehouse)
    pipeline.run_once(spark, warehouse)

    ints, types = stored(pipeline, warehouse, "ints")
    assert (types["k__ints"], types["v__ints"], types["v__floats"]) == ("long", "long", "double")
    assert (types["v__record__n"], types["v__record__last"]) == ("long", "string")
    assert ints["key"].null_count == ints.num_rows
    assert dict(zip(ints["k__ints"].to_pylist(), ints["v__ints"].to_pylist())) == {1: 8, 2: 4}
    record, _ = stored(pipeline, warehouse, "record")
    assert sorted(zip(record["v__record__n"].to_pylist(), record["v__record__last"].to_pylist())) \
        == [(1, "b"), (2, "c")]
    for name in ("nothing", "declined"):
        rows, _ = stored(pipeline, warehouse, name)
        assert rows["key"].null_count == 0 and rows["value"].to_pylist()
        assert not any(column.startswith(f"k__{name}") for column in types)
    recorded = CheckpointLog(spark, pipeline.layout(warehouse)).latest().operators
    assert recorded["ints"]["storage"] == {"form": "typed", "type": "int64"}
    assert "storage" not in recorded["nothing"] and "storage" not in recorded["declined"]


def test_state_stored_as_text_stays_text_when_the_code_gains_an_inferable_state(spark,
                                                                            fixture_copy):
    pipeline = v1.pipelines()["int_sums"]  # recorded as text by a release before typed state
    pipeline.publish(spark, pd.DataFrame({"k": [1], "x": [10], "ts": [pd.Timestamp(0)]}),
                     fixture_copy)
    pipeline.run_once(spark, fixture_copy)
    rows = DeltaTable(pipeline.layout(fixture_copy).state).to_pyarrow_table(
        filters=[("operator", "=", "state")])
    assert "k__state" not in rows.column_names
    state = sp.read_state(spark, pipeline, "state", warehouse=fixture_copy)
    assert dict(zip(state["key"], state["value"])) == {1: 14, 2: 6, 3: 5}


def test_timers_keep_their_map_json(spark, warehouse):
    pipeline = _events().map(remind, state=0, name="seen", timers=True).write.to_delta("out") \
        .named("timed")
    pipeline.publish(spark, pd.DataFrame({"k": [1, 1], "x": [1, 2], "tag": ["a", "b"]}), warehouse)
    pipeline.run_once(spark, warehouse)
    rows, types = stored(pipeline, warehouse, "seen")
    assert rows["value"].to_pylist() == ["2"] and "k__seen" not in types


def test_a_value_that_does_not_fit_an_inferred_type_names_it_and_the_way_back(spark,
                                                                             warehouse):
    pipeline = _sums("binding", fn=add_x_halving_odd)  # state=0 infers int64
    pipeline.publish(spark, pd.DataFrame({"k": [1], "x": [4], "tag": ["a"]}), warehouse)
    pipeline.run_once(spark, warehouse)  # 4: fits
    version = DeltaTable(pipeline.layout(warehouse).state).version()
    pipeline.publish(spark, pd.DataFrame({"k": [1], "x": [3], "tag": ["a"]}), warehouse)
    with pytest.raises(EncodingError) as refused:
        pipeline.run_once(spark, warehouse)
    message = str(refused.value)
    assert "inferred from state=0" in message and "state_type='json'" in message
    assert "sp.migrate(spark, pipeline)" in message and "wider type" in message
    assert DeltaTable(pipeline.layout(warehouse).state).version() == version

    as_text = _sums("binding", fn=add_x_halving_odd, state_type="json")
    with pytest.raises(PipelineChangedError, match="stored typed 'int64', now declared as text"):
        as_text.run_once(spark, warehouse)
    report = sp.migrate(spark, as_text, warehouse=warehouse)
    assert report.written == {"total": 1}
    as_text.run_once(spark, warehouse)
    state = sp.read_state(spark, as_text, "total", warehouse=warehouse)
    assert dict(zip(state["key"], state["value"])) == {1: 3.5}  # (4 + 3) / 2


def test_driver_and_distributed_modes_store_the_same_inferred_state(spark, warehouse):
    batches = [pd.DataFrame({"k": [1, 2, 3, 1], "x": [1, 2, 3, 4], "tag": list("abcd")}),
               pd.DataFrame({"k": [2, 4], "x": [5, 6], "tag": list("ef")})]
    driver, distributed = _sums("on_driver"), _sums("on_executors")
    for batch in batches:
        for pipeline, mode in ((driver, "driver"), (distributed, "distributed")):
            pipeline.publish(spark, batch, warehouse)
            pipeline.run_once(spark, warehouse, mode=mode)
    expected = sp.read_state(spark, driver, "total", warehouse=warehouse)
    pd.testing.assert_frame_equal(sp.read_state(spark, distributed, "total", warehouse=warehouse),
                                  expected)
    for pipeline in (driver, distributed):
        rows, types = stored(pipeline, warehouse, "total")
        assert types["v__total"] == "long" and rows["key"].null_count == rows.num_rows
