"""Typed state (``state_type=`` on ``map``): keys and values in ``_state`` columns of their own
type, written and read back in driver mode, read by DuckDB without a JSON function, and the
same results as the same pipeline storing JSON text. Refusals: values that do not fit, keys
that cannot be typed, a name stored as text now declared typed, distributed mode."""

import duckdb
import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

import ops as sp
from ops.errors import PipelineDefinitionError
from state import ConfigError, EncodingError, PipelineChangedError
from tests.helpers import sink_rows


def running_sum(op, md, data):
    previous = sp.get(op, md)                       # Series indexed by key
    totals = data.groupby("k", sort=False)["x"].sum()
    sp.set(op, md, previous.add(totals, fill_value=0).astype("int64"))
    return data


def stats(op, md, data):
    seen = sp.get(op, md)
    n = seen["n"] + len(data)
    mean = (seen["mean"] * seen["n"] + float(data["x"].sum())) / n
    sp.set(op, md, {"n": n, "mean": mean, "last": str(data["tag"].iloc[-1])})
    if n >= 6:  # a key seen enough is forgotten: a tombstone
        sp.remove(op, md)
    return data


def _sums(name, state_name="total", **typed):
    return (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"}, max_versions=1)
            .map(running_sum, state=0, name=state_name, vectorized=True, **typed)
            .write.to_delta("out")).named(name)


def _stats(name, **typed):
    schema = {"k": "string", "x": "long", "tag": "string"}
    return (sp.read.from_callback("in", key="k", schema=schema, max_versions=1)
            .map(stats, state={"n": 0, "mean": 0.0, "last": ""}, name="stats", **typed)
            .write.to_delta("out")).named(name)


def _batches(rng, count, keys):
    return [pd.DataFrame({"k": rng.integers(0, keys, 2_000), "x": rng.integers(-50, 50, 2_000)})
            for _ in range(count)]


def test_a_typed_running_sum_is_stored_as_numbers_and_equals_json_storage(spark, warehouse):
    batches = _batches(np.random.default_rng(3), 3, 500)
    typed, text = _sums("typed_sums", state_type=int), _sums("text_sums", state_type="json")
    for pipeline in (typed, text):
        for batch in batches:  # a run per batch: each run reads its keys' state back
            pipeline.publish(spark, batch, warehouse)
            pipeline.run_once(spark, warehouse)

    state = sp.read_state(spark, typed, "total", warehouse=warehouse)
    expected = pd.concat(batches).groupby("k")["x"].sum()
    assert dict(zip(state["key"], state["value"])) == expected.to_dict()
    as_text = sp.read_state(spark, text, "total", warehouse=warehouse)  # sorted by key text
    pd.testing.assert_frame_equal(state, as_text.sort_values("key").reset_index(drop=True))

    path = typed.layout(warehouse).state
    table = DeltaTable(path)
    types = {field.name: str(field.type) for field in table.schema().fields}
    assert types["k__total"] == "PrimitiveType(\"long\")" and types["v__total"] == "PrimitiveType(\"long\")"
    rows = table.to_pyarrow_table(filters=[("operator", "=", "total")])
    assert rows["key"].null_count == rows["value"].null_count == rows.num_rows  # no text at all
    assert table.history(1)[0]["clientVersion"].startswith("delta-rs")  # not left to Spark

    # any engine: the latest row per key, summed as numbers, no JSON function (DuckDB over the
    # table's current files, as delta-rs lists them: its delta extension is not installed here)
    state_files = table.to_pyarrow_dataset()  # noqa: F841 (DuckDB finds it by its name)
    total = duckdb.sql("""
        SELECT sum(v__total) FROM (
          SELECT v__total, deleted, row_number() OVER (PARTITION BY k__total
                 ORDER BY checkpoint_id DESC) AS n
          FROM state_files WHERE operator = 'total' AND k__total IS NOT NULL)
        WHERE n = 1 AND NOT deleted""").fetchall()[0][0]
    assert total == expected.sum()


def test_a_typed_record_with_string_keys_and_tombstones_equals_json_storage(spark, warehouse):
    rng = np.random.default_rng(5)
    batches = [pd.DataFrame({"k": [f"sensor-{i}" for i in rng.integers(0, 40, 60)],
                             "x": rng.integers(0, 9, 60), "tag": rng.choice(["a", "é", "z"], 60)})
               for _ in range(3)]
    typed = _stats("typed_stats", state_type={"n": int, "mean": float, "last": str})
    text = _stats("text_stats", state_type="json")
    for pipeline in (typed, text):
        for batch in batches:
            pipeline.publish(spark, batch, warehouse)
            pipeline.run_once(spark, warehouse)
    got = sp.read_state(spark, typed, "stats", warehouse=warehouse)
    want = sp.read_state(spark, text, "stats", warehouse=warehouse)
    assert len(got) and len(got) < 40  # some keys were forgotten
    assert dict(zip(got["key"], got["value"])) == dict(zip(want["key"], want["value"]))
    assert sink_rows(spark, typed, warehouse, "out").shape[0] == 180


def test_a_value_that_does_not_fit_stops_the_batch_before_anything_is_written(spark, warehouse):
    def halves(op, md, data):
        half = data.groupby("k")["x"].sum() / 2
        if (half % 1 == 0).all():  # whole numbers are set as ints, as the state is declared
            half = half.astype("int64")
        sp.set(op, md, sp.get(op, md) + half)
        return data

    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
                .map(halves, state=0, name="half", vectorized=True, state_type=int)
                .write.to_delta("out")).named("misfit")
    pipeline.publish(spark, pd.DataFrame({"k": [1, 2], "x": [2, 4]}), warehouse)
    pipeline.run_once(spark, warehouse)  # whole numbers: fits
    version = DeltaTable(pipeline.layout(warehouse).state).version()
    pipeline.publish(spark, pd.DataFrame({"k": [1], "x": [3]}), warehouse)
    with pytest.raises(EncodingError, match=r"'half' for key 1: 2\.5 does not fit .*'int64'"):
        pipeline.run_once(spark, warehouse)
    assert DeltaTable(pipeline.layout(warehouse).state).version() == version
    assert len(sink_rows(spark, pipeline, warehouse, "out")) == 2


def test_keys_that_cannot_be_typed_are_refused_by_name(spark, warehouse):
    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "double", "x": "long"})
                .map(running_sum, state=0, name="total", vectorized=True, state_type=int)
                .write.to_delta("out")).named("float_keys")
    pipeline.publish(spark, pd.DataFrame({"k": [1.5], "x": [1]}), warehouse)
    with pytest.raises(EncodingError, match="key 1.5 is not such a key"):
        pipeline.run_once(spark, warehouse)


def test_declarations_are_checked_when_the_pipeline_is_defined():
    stream = sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
    with pytest.raises(PipelineDefinitionError, match="not a state type"):
        stream.map(running_sum, state=0, state_type=list)
    with pytest.raises(PipelineDefinitionError, match="initial state 0.5 is not of"):
        stream.map(running_sum, state=0.5, state_type=int)
    with pytest.raises(PipelineDefinitionError, match="single underscores"):
        stream.map(running_sum, state=0, name="a__b", state_type=int)
    unkeyed = sp.read.from_callback("in", schema={"x": "long"})
    with pytest.raises(PipelineDefinitionError, match="for keyed state"):
        unkeyed.map(running_sum, state=0, state_type=int)


def test_a_name_stored_as_text_is_not_silently_read_as_typed(spark, warehouse):
    text = _sums("switched", state_type="json")
    text.publish(spark, pd.DataFrame({"k": [1], "x": [2]}), warehouse)
    text.run_once(spark, warehouse)
    with pytest.raises(PipelineChangedError, match="stored as text \\(json\\), now declared typed"):
        _sums("switched", state_type=int).run_once(spark, warehouse)


def test_a_migration_edits_typed_state_as_text_and_a_declared_type_converts_after(spark,
                                                                                   warehouse):
    typed = _sums("typed_migrated", state_type=int)
    typed.publish(spark, pd.DataFrame({"k": [1], "x": [2]}), warehouse)
    typed.run_once(spark, warehouse)
    renamed = _sums("typed_migrated", state_name="sum2", state_type=int)
    sp.migrate(spark, renamed, rename={"total": "sum2"}, warehouse=warehouse)
    rows = sorted(DeltaTable(typed.layout(warehouse).state).to_pyarrow_table().to_pylist(),
                  key=lambda row: row["checkpoint_id"])
    assert [(row["key"], row["value"]) for row in rows if row["operator"] == "sum2"] == [("1", "2")]
    assert [row["deleted"] for row in rows if row["k__total"] == 1] == [False, True]
    with pytest.raises(PipelineChangedError, match="stored as text \\(json\\), now declared typed"):
        renamed.run_once(spark, warehouse)  # written as text by the edit: converted next
    sp.migrate(spark, renamed, warehouse=warehouse)
    state = sp.read_state(spark, renamed, "sum2", warehouse=warehouse)
    assert dict(zip(state["key"], state["value"])) == {1: 2}
    assert [key for key in stored_rows(renamed, warehouse, "sum2")["k__sum2"].to_pylist()
            if key is not None] == [1]  # typed again


def test_distributed_mode_gives_what_driver_mode_gives_and_runs_switch_between_them(spark,
                                                                                  warehouse):
    batches = _batches(np.random.default_rng(11), 4, 300)
    driver, distributed = _sums("typed_driver", state_type=int), _sums("typed_executors",
                                                                        state_type=int)
    switching = _sums("typed_switching", state_type=int)
    for number, batch in enumerate(batches):
        for pipeline, mode in ((driver, "driver"), (distributed, "distributed"),
                               (switching, "driver" if number % 2 else "distributed")):
            pipeline.publish(spark, batch, warehouse)
            pipeline.run_once(spark, warehouse, mode=mode)

    expected = sp.read_state(spark, driver, "total", warehouse=warehouse)
    for pipeline in (distributed, switching):
        pd.testing.assert_frame_equal(sp.read_state(spark, pipeline, "total", warehouse=warehouse),
                                      expected)
        rows = stored_rows(pipeline, warehouse)
        assert rows["key"].null_count == rows.num_rows and rows["k__total"].null_count == 0
    # the executors' files, committed by delta-rs with the checkpoint's record
    assert DeltaTable(distributed.layout(warehouse).state).history(1)[0]["clientVersion"].startswith(
        "delta-rs")


def test_distributed_mode_refuses_typed_state_with_timers_before_running(spark, warehouse):
    def remind(op, md, data):
        sp.set(op, md, sp.get(op, md) + len(data))
        return data

    pipeline = (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
                .map(remind, state=0, name="seen", ttl="1h", state_type=int)
                .write.to_delta("out")).named("typed_ttl")
    pipeline.publish(spark, pd.DataFrame({"k": [1], "x": [2]}), warehouse)
    with pytest.raises(ConfigError, match="timers or a TTL"):
        pipeline.run_once(spark, warehouse, mode="distributed")


def stored_rows(pipeline, warehouse, name="total"):
    return DeltaTable(pipeline.layout(warehouse).state).to_pyarrow_table(
        filters=[("operator", "=", name), ("deleted", "=", False)])


def test_bootstrapped_state_of_a_declared_type_is_converted_by_migrate_not_lost(spark, warehouse,
                                                                               tmp_path):
    pipeline = _sums("typed_bootstrapped", state_type=int)
    seed = str(tmp_path / "seed")
    spark.createDataFrame(pd.DataFrame({"k": [1, 2], "value": [100, 200]})).write.format("delta").save(seed)
    sp.bootstrap_state(spark, pipeline, {"total": seed}, warehouse=warehouse)  # written as text
    pipeline.publish(spark, pd.DataFrame({"k": [1], "x": [5]}), warehouse)
    with pytest.raises(PipelineChangedError, match="stored as text \\(json\\), now declared typed"):
        pipeline.run_once(spark, warehouse)
    sp.migrate(spark, pipeline, warehouse=warehouse)
    pipeline.run_once(spark, warehouse)
    state = sp.read_state(spark, pipeline, "total", warehouse=warehouse)
    assert dict(zip(state["key"], state["value"])) == {1: 105, 2: 200}
