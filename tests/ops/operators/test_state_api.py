"""The state API's contract with user functions (no Spark needed): what ``set`` returns, and
what a vectorized ``set`` refuses."""

import pandas as pd
import pytest

import ops as sp
from ops import BatchScope
from ops.operators.basic import Map
from state import PipelineLayout, StateStore

FRAME = pd.DataFrame({"k": ["a", "b", "a"], "x": [1, 2, 3]})


def apply(fn, store, vectorized=False):
    op = Map(fn, "sums", state=0, vectorized=vectorized, keys=("k",))
    return op.apply(BatchScope("p", 1, ("k",), store), FRAME)


def memory_store():
    return StateStore(None, PipelineLayout("/unused", "p"), as_of=None)


def test_set_returns_what_it_stored_so_a_function_can_end_with_it():
    def running(op, md, data):  # KX: ... .qsp.set[op;md;newSum]
        return data.assign(total=sp.set(op, md, sp.get(op, md) + int(data["x"].sum())))

    store = memory_store()
    assert apply(running, store)["total"].tolist() == [4, 2, 4]
    assert store.operator("sums").get_values(["a", "b"]) == [4, 2]


def test_a_vectorized_set_of_keys_outside_the_batch_is_refused_and_writes_nothing():
    def stray(op, md, data):
        sp.set(op, md, pd.Series([5, 7], index=["a", "zz"]))
        return data

    store = memory_store()
    with pytest.raises(sp.OperatorError) as failure:
        apply(stray, store, vectorized=True)
    message = str(failure.value)
    assert "pipeline 'p', operator 'sums', batch 1" in message and "['zz']" in message
    assert store.operator("sums").changed_keys == 0


def test_a_vectorized_set_of_a_subset_of_the_batchs_keys_is_taken():
    def only_a(op, md, data):
        return data.assign(kept=sp.set(op, md, pd.Series([9], index=["a"])).sum())

    store = memory_store()
    assert apply(only_a, store, vectorized=True)["kept"].tolist() == [9, 9, 9]
    assert store.operator("sums").get_values(["a", "b"]) == [9, 0]


def test_a_key_column_dropped_upstream_names_pipeline_operator_batch_and_columns():
    store = memory_store()
    op = Map(lambda op, md, data: data, "sums", state=0, keys=("k",))
    with pytest.raises(sp.OperatorError) as failure:
        op.apply(BatchScope("p", 4, ("k",), store), FRAME[["x"]])
    assert str(failure.value).startswith(
        "pipeline 'p', operator 'sums', batch 4: key field(s) ['k'] are not in the data")
    assert "its columns: ['x']" in str(failure.value)


def test_reading_the_state_of_an_operator_the_pipeline_does_not_have_names_those_it_has():
    pipeline = (sp.read.from_callback("n", schema={"k": "string", "x": "long"}, key="k")
                .map(lambda op, md, data: data, state=0, name="sums").write.to_delta("out")
                .named("api_unknown"))
    with pytest.raises(sp.PipelineDefinitionError, match=r"no state under operator 'sum'; its "
                       r"stateful operators: \['sums'\]"):
        sp.read_state(None, pipeline, "sum")  # refused before anything is read
