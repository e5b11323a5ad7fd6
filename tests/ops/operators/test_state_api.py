"""The state API's contract with user functions (no Spark needed): what ``set`` returns, and
what a vectorized ``set`` refuses."""

import pandas as pd
import pytest

import ops as sp
from ops import BatchScope
from ops.operators.basic import Map
from state import EncodingError, PipelineLayout, StateStore

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


def test_md_none_is_the_operators_unkeyed_state_and_a_mapping_names_an_entry_as_in_kx():
    def fn(op, md, data):  # KX: .qsp.set[`s;::;..] and .qsp.set[`s;``key!(::;`k1);..]
        sp.set(op, None, sp.get(op, None) + len(data))
        sp.set(op, {"key": "k1"}, [1, 2])
        return data.assign(unkeyed=sp.get(op, None), named=str(sp.get(op, {"key": "k1"})))

    store = memory_store()
    out = apply(fn, store)
    assert out["unkeyed"].tolist() == [2, 3, 2] and set(out["named"]) == {"[1, 2]"}  # a, then b
    assert store.operator("sums").get_values([None, "k1", "a"]) == [3, [1, 2], 0]


def test_op_may_be_the_operators_name_and_an_unknown_name_lists_the_stateful_operators():
    def by_name(op, md, data):
        return data.assign(total=sp.set("sums", md, sp.get("sums", md) + 1))

    assert apply(by_name, memory_store())["total"].tolist() == [1, 1, 1]  # one call per key

    op = Map(lambda op, md, data: sp.get("sum", md), "sums", state=0, keys=("k",))
    scope = BatchScope("p", 2, ("k",), memory_store(), operators=("sums", "windows"))
    with pytest.raises(sp.OperatorError) as failure:
        op.apply(scope, FRAME)
    assert "no operator named 'sum'" in str(failure.value)
    assert "['sums', 'windows']" in str(failure.value) and "key 'a'" in str(failure.value)


def test_global_storage_is_shared_by_every_operator_of_the_pipeline():
    def counter(name):
        def fn(op, md, data):
            seen = sp.set(None, {"key": "rows"}, sp.get(None, {"key": "rows"}) or 0)
            sp.set(None, {"key": "rows"}, seen + len(data))
            return data.assign(**{name: sp.get(None, {"key": "rows"})})
        return Map(fn, name, state=0, vectorized=True, keys=("k",))

    store = memory_store()
    scope = BatchScope("p", 1, ("k",), store)
    out = counter("second").apply(scope, counter("first").apply(scope, FRAME))
    assert out["first"].tolist() == [3, 3, 3] and out["second"].tolist() == [6, 6, 6]
    assert store.operator("__global__").get("rows") == 6


def test_global_storage_on_an_executor_is_an_error_that_says_to_use_driver_mode():
    handed_in = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    op = Map(lambda op, md, data: sp.get(None, md), "sums", state=0, keys=("k",))
    with pytest.raises(sp.OperatorError, match="global storage lives on the driver"):
        op.apply(BatchScope("p", 1, ("k",), handed_in), FRAME)


def test_state_outside_the_calls_key_in_a_task_of_a_keyed_operator_is_an_error():
    handed_in = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    op = Map(lambda op, md, data: sp.get(op, None), "sums", state=0, keys=("k",))
    with pytest.raises(sp.OperatorError, match="each task holding only its keys' state"):
        op.apply(BatchScope("p", 1, ("k",), handed_in), FRAME)


def test_what_a_function_reads_back_in_the_run_is_what_a_restart_reads():
    def fn(op, md, data):
        stored = sp.set(op, md, {"pair": (1, 2), 3: "three"})
        sp.get(op, md)["pair"].append(99)  # an in-place change without set changes nothing
        return data.assign(stored=str(stored), read=str(sp.get(op, md)))

    store = memory_store()
    out = apply(fn, store)
    expected = str({"pair": [1, 2], "3": "three"})  # as JSON gives it back
    assert set(out["stored"]) == {expected} and set(out["read"]) == {expected}
    encoded = store.changed_rows().set_index("key")["value"]
    restarted = StateStore.of_rows(pd.DataFrame(
        {"operator": "sums", "key": encoded.index, "value": encoded.to_numpy()}))
    assert str(restarted.operator("sums").get("a")) == expected


def test_a_value_the_codec_cannot_store_fails_at_set_naming_operator_and_key():
    def fn(op, md, data):
        sp.set(op, md, object())
        return data

    with pytest.raises(EncodingError) as failure:
        apply(fn, memory_store())
    assert str(failure.value).startswith("pipeline 'p', operator 'sums', batch 1, key 'a': ")


@pytest.mark.parametrize("vectorized", [False, True])
def test_remove_deletes_a_keys_state_with_a_tombstone_and_it_reads_as_initial_again(vectorized):
    def keep_a_remove_b(op, md, data):
        if vectorized:
            sp.set(op, md, data.groupby("k")["x"].sum())
            sp.remove(op, md, ["b"])
            return data.assign(after=data["k"].map(sp.get(op, md)))
        if md.key == "b":
            sp.remove(op, md)
            return data.assign(after=sp.get(op, md))
        return data.assign(after=sp.set(op, md, int(data["x"].sum())))

    rows = pd.DataFrame({"operator": ["sums"], "key": ['"b"'], "value": ["7"]})
    store = StateStore.of_rows(rows)  # b holds 7 in the last checkpoint
    out = apply(keep_a_remove_b, store, vectorized=vectorized)
    state = store.operator("sums")
    assert state.held_keys() == ["a"] and state.get_values(["a", "b"]) == [4, 0]
    assert state.changed_rows().set_index("key")["deleted"].to_dict() == {'"a"': False, '"b"': True}
    assert out.groupby("k")["after"].first().to_dict() == {"a": 4, "b": 0}


def test_remove_of_keys_outside_a_vectorized_batch_is_refused():
    def stray(op, md, data):
        sp.remove(op, md, ["zz"])
        return data

    with pytest.raises(sp.OperatorError, match=r"remove\(\) was given 1 key\(s\) that are not in "
                                               r"this batch, such as \['zz'\]"):
        apply(stray, memory_store(), vectorized=True)
