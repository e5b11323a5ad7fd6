"""Numeric state held in columns (state.run.columns) against the same operations on state held as
objects (state.run.objects), the representation it replaces for vectorized operators: every read,
every checkpoint's rows, and the move from one to the other in the middle of a run."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import ops as sp
from state import StateStore
from state.contract.codecs import JsonCodec
from state.read.found import Found
from state.run.columns import ColumnValues, KeyPositions, ValuesNeedObjects
from state.run.encodings import JsonEncoding
from state.run.objects import ObjectValues


def loader_of(stored: dict):
    """A loader over ``stored`` (encoded key -> encoded value), as a store's."""
    def load(operator, keys):
        wanted = list(stored) if keys is None else [k for k in keys.to_pylist() if k in stored]
        return Found.placed(keys, pa.table({"key": pa.array(wanted, pa.string()),
                                            "value": pa.array([stored[k] for k in wanted], pa.string())}))
    return load


def checkpoint_of(held) -> dict:
    rows = held.changed_rows()
    return {key: (value, deleted) for key, value, deleted
            in zip(rows["key"], rows["value"], rows["deleted"])}


@pytest.mark.parametrize("initial", [0, 0.5])
def test_columns_read_and_write_what_objects_do(initial):
    """A random run of gets, sets and deletes over keys some of which a checkpoint holds, with
    checkpoints between some batches: each read and each checkpoint's rows are the same."""
    rng = np.random.default_rng(7)
    kind = int if isinstance(initial, int) else float
    stored = {str(k): json.dumps(kind(k * 3)) for k in range(0, 400, 2)}
    columns = ColumnValues("sum", initial, JsonEncoding("sum", JsonCodec(), loader_of(stored)))
    objects = ObjectValues("sum", initial, JsonEncoding("sum", JsonCodec(), loader_of(stored)))
    for batch in range(40):  # bounded: a batch of random operations each
        keys = pd.Index(np.unique(rng.integers(0, 600, rng.integers(1, 60))))
        columns.prefetch(keys), objects.prefetch(keys.tolist())
        assert columns.get_many(keys).tolist() == objects.get_many(keys).tolist()
        chosen = keys[rng.random(len(keys)) < 0.6]
        values = pd.Series(rng.integers(-50, 50, len(chosen)).astype(type(initial)), index=chosen)
        columns.set_many(values), objects.set_many(values)
        gone = keys[rng.random(len(keys)) < 0.2].tolist()
        columns.delete_many(gone), objects.delete_many(gone)
        assert columns.changed_keys == objects.changed_keys
        if batch % 3 == 2:  # a checkpoint: the same rows, then both count changes anew
            assert checkpoint_of(columns) == checkpoint_of(objects)
            columns.mark_checkpointed(), objects.mark_checkpointed()
        else:
            columns.encode_changes(), objects.encode_changes()
    everything = pd.Index(range(600))
    assert columns.get_many(everything).tolist() == objects.get_many(everything).tolist()
    assert checkpoint_of(columns) == checkpoint_of(objects)


def test_a_value_of_another_type_moves_the_state_to_objects_losing_nothing():
    """An int state given floats (then a dict) is held as objects from then on, with the values
    and the changes not yet checkpointed it held in columns."""
    store = StateStore.of_rows(pd.DataFrame({"operator": ["s", "s"], "key": ["1", "2"],
                                             "value": ["10", "20"]}))
    state = store.operator("s", 0, columns=True)
    state.set_many(pd.Series([11, 31], index=[1, 3]))
    state.delete_many([2])
    assert state.in_columns
    state.set_many(pd.Series([1.5], index=[4]))  # JSON would store 1.5: a float, not an int
    assert not state.in_columns
    assert state.get_values([1, 2, 3, 4, 5]) == [11, 0, 31, 1.5, 0]
    state.set_many(pd.Series([{"n": 1}], index=[5]))
    assert checkpoint_of(state) == {"1": ("11", False), "2": (None, True), "3": ("31", False),
                                    "4": ("1.5", False), "5": ('{"n":1}', False)}


@pytest.mark.parametrize("stored, initial, read", [
    ("2.5", 0, 2.5),  # a float stored for an int state (an earlier release, another type)
    ("[1,2]", 0, [1, 2]),
    ("123456789012345678901234", 0, 123456789012345678901234),  # beyond 64 bits
    ("7", 0.0, 7),  # an int stored for a float state stays an int, as JSON reads it
])
def test_a_stored_value_of_another_type_is_read_as_objects(stored, initial, read):
    store = StateStore.of_rows(pd.DataFrame({"operator": ["s"], "key": ["1"], "value": [stored]}))
    state = store.operator("s", initial, columns=True)
    assert state.get_values([1, 2]) == [read, initial]
    assert not state.in_columns


def test_float_state_keeps_json_texts():
    """NaN and large floats encode as the JSON codec writes them, and read back."""
    store = StateStore.of_rows(pd.DataFrame({"operator": ["s", "s"], "key": ["1", "2"],
                                             "value": ["NaN", "1e+20"]}))
    state = store.operator("s", 0.0, columns=True)
    got = state.get_values([1, 2])
    assert np.isnan(got[0]) and got[1] == 1e20 and state.in_columns
    state.set_many(pd.Series([float("inf"), 2.5e-7], index=[1, 2]))
    assert checkpoint_of(state) == {"1": ("Infinity", False), "2": ("2.5e-07", False)}


def test_string_and_compound_keys():
    stored = {'"a"': "1", '["b",2]': "5"}
    columns = ColumnValues("s", 0, JsonEncoding("s", JsonCodec(), loader_of(stored)))
    keys = pd.Index(["a", ("b", 2), "c"], tupleize_cols=False)
    assert columns.get_many(keys).tolist() == [1, 5, 0]
    columns.set_many(pd.Series([9, 9], index=pd.Index([("b", 2), "c"], tupleize_cols=False)))
    assert checkpoint_of(columns) == {'["b",2]': ("9", False), '"c"': ("9", False)}


def test_key_positions_many_small_additions_then_bulk():
    """Keys added a few at a time (a continuous run's batches) and in bulk keep their
    positions, whether held in the dict or in the index they are merged into."""
    positions = KeyPositions()
    added = []
    for start in range(0, 20_000, 7):  # bounded: ~2900 additions of 7 keys
        keys = pd.Index(range(start, min(start + 7, 20_000)))
        positions.add(keys)
        added.extend(keys)
    positions.add(pd.Index(range(20_000, 100_000)))
    added.extend(range(20_000, 100_000))
    probe = pd.Index([0, 19_999, 5, 99_999, -1, 100_000, 4_100])
    assert positions.find(probe).tolist() == [added.index(k) if k in added else -1 for k in probe]
    assert positions.keys_at(np.array([99_999, 3, 20_000])).tolist() == [99_999, 3, 20_000]


def test_unfitting_values_change_nothing():
    columns = ColumnValues("s", 0, JsonEncoding("s", JsonCodec(), loader=None))
    with pytest.raises(ValuesNeedObjects):
        columns.set_many(pd.Series([1.5, 2.5], index=[1, 2]))
    assert columns.changed_keys == 0 and columns.get_values([1, 2]) == [0, 0]


def vectorized_total(op, md, data):
    total = sp.get(op, md) + data.groupby("k")["x"].sum()
    sp.set(op, md, total)
    return data.assign(total=data["k"].map(total))


def test_a_vectorized_pipeline_holds_columns_across_runs(spark, warehouse):
    """A vectorized sum over two runs (the second reads the first's state from _state, in
    columns): the totals continue, and the state reads back as the values set."""
    built = (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
             .map(vectorized_total, state=0, vectorized=True, name="sums", state_type="json")
             .write.to_delta("out")).named("columnar")
    for rows in ([{"k": 1, "x": 2}, {"k": 2, "x": 5}], [{"k": 1, "x": 3}, {"k": 3, "x": 1}]):
        built.publish(spark, rows, warehouse)
        built.run_once(spark, warehouse)
    out = spark.read.format("delta").load(built.layout(warehouse).table("out")).toPandas()
    assert sorted(out[["k", "total"]].values.tolist()) == [[1, 2], [1, 5], [2, 5], [3, 1]]
    state = StateStore(spark, built.layout(warehouse), 2).operator("sums", 0, columns=True)
    assert state.get_values([1, 2, 3, 4]) == [5, 5, 1, 0] and state.in_columns
