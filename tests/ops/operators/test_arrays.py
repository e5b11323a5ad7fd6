"""Per-key maps on NumPy arrays (``map(..., data="arrays")``): the same results, state and row
order as per-key maps on DataFrames, and clear errors for what they cannot take."""

import numpy as np
import pandas as pd
import pytest

import ops as sp
from dagster_project.pipelines import SCHEMA, SEED_ROWS
from ops import BatchScope
from ops.operators.basic import Map
from state import PipelineLayout, StateStore
from tests.helpers import sink_column

RNG = np.random.default_rng(7)
FRAME = pd.DataFrame({"k": RNG.integers(0, 50, 1_000), "x": RNG.integers(1, 10, 1_000)},
                     index=pd.RangeIndex(100, 1_100))


def on_frames(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def on_arrays(op, md, data):
    total = sp.get(op, md) + np.cumsum(data["x"])
    sp.set(op, md, int(total[-1]))
    return {**data, "total": total}


def apply(fn, frame=FRAME, store=None, batch=1, **options):
    store = store or StateStore(None, PipelineLayout("/unused", "p"), as_of=None)
    op = Map(fn, "sums", state=0, keys=("k",), **options)
    return op.apply(BatchScope("p", batch, ("k",), store), frame), store


def test_arrays_give_what_frames_give_in_the_same_order_and_state():
    store = StateStore(None, PipelineLayout("/unused", "p"), as_of=None)
    frames_store = StateStore(None, PipelineLayout("/unused", "p"), as_of=None)
    for batch in (1, 2):  # the second batch continues from the first one's state
        expected, frames_store = apply(on_frames, batch=batch, store=frames_store)
        got, store = apply(on_arrays, store=store, batch=batch, data="arrays")
        pd.testing.assert_frame_equal(got, expected)
    keys = sorted(FRAME["k"].unique().tolist())
    assert store.operator("sums").get_values(keys) == frames_store.operator("sums").get_values(keys)


def test_results_without_a_row_per_row_follow_the_batch_in_key_order():
    def per_key_count(op, md, data):
        sp.set(op, md, sp.get(op, md) + len(data["x"]))
        return None if md.key == "skip" else {"k": [md.key], "n": [sp.get(op, md)]}

    frame = pd.DataFrame({"k": ["b", "a", "skip", "b", "a", "a"], "x": [1, 2, 3, 4, 5, 6]})
    out, _ = apply(per_key_count, frame, data="arrays")
    assert out.to_dict("list") == {"k": ["b", "a"], "n": [2, 3]}
    assert out.index.tolist() == [6, 7]  # numbered after the batch's rows


def test_a_bad_result_names_the_key_and_what_to_return():
    with pytest.raises(sp.OperatorError, match=r"pipeline 'p', operator 'sums', batch 1.*dict of"):
        apply(lambda op, md, data: [1, 2], data="arrays")
    with pytest.raises(sp.OperatorError, match="different lengths"):
        apply(lambda op, md, data: {"a": [1], "b": [1, 2]}, data="arrays")


def test_arrays_need_a_keyed_stateful_per_key_map():
    with pytest.raises(sp.PipelineDefinitionError, match="data must be 'frame' or 'arrays'"):
        Map(on_arrays, "sums", state=0, keys=("k",), data="numpy")
    with pytest.raises(sp.PipelineDefinitionError, match="per-key calls"):
        Map(on_arrays, "sums", state=0, keys=("k",), data="arrays", vectorized=True)
    with pytest.raises(sp.PipelineDefinitionError, match="per-key calls"):
        Map(on_arrays, "sums", state=0, data="arrays")


def test_an_arrays_map_runs_and_resumes_from_its_checkpoint(spark, warehouse):
    pipeline = (sp.read.from_callback("publish", key="y", schema=SCHEMA)
                .map(on_arrays, state=0, data="arrays").write.to_delta("sums")).named("arrays_sum")
    pipeline.publish(spark, SEED_ROWS[:4], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, SEED_ROWS[4:], warehouse)
    assert pipeline.run_once(spark, warehouse).checkpoint_id == 2  # state read back from _state
    assert sink_column(spark, pipeline, warehouse, "total") == [1, 3, 6, 1, 3, 6, 10]
