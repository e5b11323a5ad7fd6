"""Timers and state TTL of a keyed map, batch by batch against hand-computed expectations (no
Spark: the operator over an in-memory store, batch times given by hand). Runs through the
runtime, restarts, crashes and distributed mode are in tests/ops/runtime/recovery/test_timer_runs.py."""

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

import ops as sp
from ops import BatchScope
from ops.operators import TimerDeclaration
from ops.operators.basic import Map
from ops.operators.timing import wake_at
from state import PipelineLayout, StateStore, expiry_state

NO_ROWS = pd.DataFrame()


def memory_store():
    return StateStore(None, PipelineLayout("/unused", "p"), as_of=None)


def rows(*pairs, ts=None):
    frame = pd.DataFrame({"k": [k for k, _ in pairs], "x": [x for _, x in pairs]})
    return frame if ts is None else frame.assign(ts=pd.to_datetime(ts, unit="ms", utc=True))


class Batches:
    """One map over one store, applied batch after batch."""

    def __init__(self, fn, vectorized=False, drop_late=False, **clock):
        self.store = memory_store()
        self.map = Map(fn, "s", state=0, keys=("k",), vectorized=vectorized,
                       clock=TimerDeclaration("s", **clock), timers=True, drop_late=drop_late)
        self.batch = 0

    def run(self, at, frame=NO_ROWS):
        self.batch += 1
        return self.map.apply(BatchScope("p", self.batch, ("k",), self.store, batch_time=at), frame)

    def timers(self):
        timers = self.store.timers("s")
        return {key: timers.get(key) for key in sorted(self.store.operator("s__timers").held_keys())
                if key != "__watermark__"}


def summing_with_timeout(after_ms):
    """Sums x per key; a key quiet for ``after_ms`` of processing time reports its total."""
    def fn(op, md, data):
        if md.timer is not None:
            return pd.DataFrame({"k": [md.key], "total": [sp.get(op, md)], "fired": [md.timer]})
        sp.set(op, md, sp.get(op, md) + int(data["x"].sum()))
        sp.set_timer(op, md, at=md.batch_time + after_ms)
        return None
    return fn


def test_a_processing_time_timer_fires_once_strictly_after_its_deadline_with_no_rows():
    run = Batches(summing_with_timeout(500))
    assert run.run(1000, rows(("a", 1), ("b", 2), ("a", 3))).empty
    assert run.timers() == {"a": 1500, "b": 1500}
    assert run.run(1500).empty  # strict: 1500 is not after 1500
    fired = run.run(1501)
    assert fired.to_dict("records") == [{"k": "a", "total": 4, "fired": 1500},
                                        {"k": "b", "total": 2, "fired": 1500}]
    assert run.timers() == {}  # a fired timer is cleared unless the call sets it again
    assert run.run(99_000).empty


def test_a_call_with_rows_clears_the_keys_timer_unless_it_sets_one_again():
    calls = []

    def fn(op, md, data):
        calls.append((md.key, md.timer, len(data)))
        if md.batch_id == 1:
            sp.set_timer(op, md, at=2000)
        return None

    run = Batches(fn)
    run.run(1000, rows(("a", 1), ("b", 1)))
    run.run(3000, rows(("a", 1)))  # both due: a has rows (called with them), b has none
    assert calls[2:] == [("a", None, 1), ("b", 2000, 0)]
    run.run(9000)
    assert len(calls) == 4 and run.timers() == {}


def test_a_timer_set_by_a_timer_call_fires_in_a_later_batch_not_the_same_one():
    def fn(op, md, data):
        sp.set_timer(op, md, at=md.batch_time - 1)  # already due: still waits for the next batch
        return pd.DataFrame({"k": [md.key], "batch": [md.batch_id]})

    run = Batches(fn)
    run.run(1000, rows(("a", 1)))
    assert run.run(2000)["batch"].tolist() == [2]
    assert run.run(3000)["batch"].tolist() == [3]


def test_event_time_timers_fire_against_the_watermark_of_the_batches_before():
    def fn(op, md, data):
        if md.timer is not None:
            return pd.DataFrame({"k": [md.key], "fired": [md.timer]})
        latest = int(data["ts"].max().value // 1_000_000)
        sp.set_timer(op, md, at=latest + 5_000)  # a session gap of 5 s of event time
        return None

    run = Batches(fn, event_time="ts", delay_ms=1_000)
    run.run(0, rows(("a", 1), ts=[10_000]))
    assert run.timers() == {"a": 15_000}
    # watermark before this batch: 10 s - 1 s = 9 s; this batch moves it to 30 s - 1 s
    assert run.run(0, rows(("b", 1), ts=[30_000])).empty
    assert run.run(0)["k"].tolist() == ["a"]  # 15 s < 29 s: fires in the next batch
    assert run.timers() == {"b": 35_000}
    with pytest.raises(sp.OperatorError, match="event-time timers: give at="):
        Batches(lambda op, md, d: sp.set_timer(op, md, after="1s"), event_time="ts").run(
            0, rows(("a", 1), ts=[1]))


def test_vectorized_calls_get_the_fired_keys_in_md_key_and_their_deadlines_in_md_timer():
    seen = []

    def fn(op, md, data):
        seen.append((list(md.key), md.timer.to_dict()))
        if md.batch_id == 1:
            sp.set_timer(op, md, at=pd.Series([1500, 2500], index=["a", "b"]))
        return None

    run = Batches(fn, vectorized=True)
    run.run(1000, rows(("a", 1), ("b", 1)))
    run.run(2000, rows(("c", 1)))
    assert seen[1] == (["c", "a"], {"a": 1500})
    assert run.timers() == {"b": 2500}


def test_ttl_deletes_a_key_quiet_for_longer_than_ttl_and_it_reads_as_initial_state_again():
    def fn(op, md, data):
        total = sp.set(op, md, sp.get(op, md) + int(data["x"].sum()))
        return data.assign(total=total)

    run = Batches(fn, ttl_ms=1000)
    run.run(0, rows(("a", 5), ("b", 1)))
    run.run(600, rows(("b", 1)))          # b renewed to 1600; a expires after 1000
    assert run.run(1001, rows(("b", 1)))["total"].tolist() == [3]
    state = run.store.operator("s")
    assert sorted(state.held_keys()) == ["b"]
    assert run.run(1200, rows(("a", 1)))["total"].tolist() == [1]  # a starts again from 0
    deleted = state.changed_rows().set_index("key")["deleted"]
    assert deleted.to_dict() == {'"a"': False, '"b"': False}  # never checkpointed: no tombstone


def test_ttl_keeps_state_bounded_on_an_endless_stream_of_new_keys():
    run = Batches(lambda op, md, data: sp.set(op, md, 1) and None, ttl_ms=3_000)
    sizes = []
    for second in range(30):  # each second 50 keys never seen before
        run.run(second * 1000, rows(*((f"k{second}-{n}", 1) for n in range(50))))
        run.store.mark_checkpointed()
        sizes.append(len(run.store.operator("s").held_keys()))
    assert max(sizes[5:]) == 200  # keys of the last 4 seconds: older ones expired
    assert len(run.store.operator(expiry_state("s")).held_keys()) == 200


def test_a_map_with_timers_needs_state_and_a_keyed_stream():
    source = sp.read.from_callback("in", schema={"x": "long"})
    with pytest.raises(sp.PipelineDefinitionError, match="need state .* and a keyed stream"):
        source.map(lambda op, md, d: d, state=0, timers=True)
    keyed = sp.read.from_callback("in", key="k", schema={"k": "string"})
    with pytest.raises(sp.PipelineDefinitionError, match="ttl='soon' is not a duration"):
        keyed.map(lambda op, md, d: d, state=0, ttl="soon")
    with pytest.raises(sp.OperatorError, match="has no timers: build it with"):
        op = keyed.map(lambda op, md, d: sp.set_timer(op, md, at=1), state=0).operators[-1]
        op.apply(BatchScope("p", 1, ("k",), memory_store()), pd.DataFrame({"k": ["a"]}))


def test_event_time_ttl_measures_a_keys_latest_event_time_against_the_watermark():
    run = Batches(lambda op, md, data: sp.set(op, md, len(data)) and None, event_time="ts",
                  ttl_ms=1_000)
    run.run(0, rows(("a", 1), ts=[0]))
    run.run(0, rows(("b", 1), ts=[5_000]))  # watermark before it: 0, so a (due 1 s) stays
    assert sorted(run.store.operator("s").held_keys()) == ["a", "b"]
    run.run(0)  # watermark 5 s: a expired; b's deadline is 6 s
    assert run.store.operator("s").held_keys() == ["b"]


@pytest.mark.parametrize("late, expected_sums", [
    ("keep", {"a": 1 + 2 + 32 + 4 + 8, "b": 16}),   # the default: the function sees late rows
    ("drop", {"a": 1 + 4 + 8, "b": 16}),            # Spark's rule: at or below the watermark
])
def test_rows_at_or_below_the_watermark_reach_the_function_unless_late_drop(late, expected_sums):
    def summing(op, md, data):
        sp.set(op, md, sp.get(op, md) + int(data["x"].sum()))
        return None

    run = Batches(summing, event_time="ts", delay_ms=1_000, drop_late=late == "drop")
    run.run(0, rows(("a", 1), ts=[10_000]))                      # watermark then 9 s
    run.run(0, rows(("a", 2), ("a", 32), ("a", 4), ts=[8_000, 9_000, 9_001]))  # 8 s, 9 s late
    run.run(0, rows(("a", 8), ("b", 16), ts=[9_001, None]))     # no event time: never late
    sums = dict(zip(["a", "b"], run.store.operator("s").get_values(["a", "b"])))
    assert sums == expected_sums


def test_late_drop_needs_event_time():
    stream = sp.read.from_callback("in", key="k", schema={"k": "string", "x": "long"})
    with pytest.raises(sp.PipelineDefinitionError, match="late= is 'keep' or 'drop'"):
        stream.map(lambda op, md, d: d, state=0, late="drop")
    with pytest.raises(sp.PipelineDefinitionError, match="late= is 'keep' or 'drop'"):
        stream.map(lambda op, md, d: d, state=0, event_time="ts", late="sometimes")


def _timer_set_by(**given):
    """The deadline ``sp.set_timer(op, md, **given)`` gives a key in a batch at 1000 ms."""
    run = Batches(lambda op, md, data: sp.set_timer(op, md, **given))
    run.run(1000, rows(("a", 1)))
    return run.timers()["a"]


@pytest.mark.parametrize("after", [10_000, 10_000.0, np.int64(10_000), np.float64(10_000.0),
                                   "10s", timedelta(seconds=10), pd.Timedelta("10s"),
                                   np.timedelta64(10, "s")])
def test_a_duration_is_a_number_of_ms_a_string_with_a_unit_or_a_timedelta(after):
    assert _timer_set_by(after=after) == 1000 + 10_000  # not 10 µs, as pandas reads an int


@pytest.mark.parametrize("at", [20_000, 20_000.0, np.int64(20_000), np.float64(20_000.0),
                                pd.Timestamp(20_000, unit="ms"),
                                pd.Timestamp(20_000, unit="ms", tz="UTC").to_pydatetime(),
                                np.datetime64(20_000, "ms"), "1970-01-01T00:00:20Z"])
def test_a_deadline_is_epoch_ms_int_or_float_or_a_timestamp(at):
    assert _timer_set_by(at=at) == 20_000  # a float is not the epoch's start


@pytest.mark.parametrize("given, refusal", [
    ({"after": "10000"}, "takes a duration: a string with a unit"),
    ({"after": "soon"}, r"after='soon'\) is not a duration"),
    ({"after": -5}, "is negative"),
    ({"after": True}, "takes a duration"),
    ({"after": [1]}, "takes a duration"),
    ({"at": True}, "takes epoch ms"),
    ({"at": "20000"}, "takes epoch ms"),
    ({"at": "next tuesday-ish"}, "is not a timestamp"),
    ({"at": float("nan")}, "finite number of epoch ms"),
    ({"at": pd.NaT}, "missing"),
    ({"at": object()}, "takes epoch ms"),
])
def test_a_deadline_or_duration_of_another_kind_is_refused_naming_operator_and_value(given, refusal):
    with pytest.raises(sp.OperatorError, match=refusal) as failure:
        _timer_set_by(**given)
    assert "operator 's'" in str(failure.value)


def test_a_deadline_equal_to_the_batch_time_is_not_due_and_wake_at_says_the_ms_after():
    run = Batches(summing_with_timeout(500))
    run.run(1000, rows(("a", 1)))
    clock = run.map.clock
    assert wake_at(clock, run.store, 1500) == 1501  # what the runtime compares with its clock
    assert run.run(1500).empty and run.run(1501)["k"].tolist() == ["a"]


@pytest.mark.parametrize("vectorized", [False, True])
def test_md_carries_the_watermark_the_batch_started_with(vectorized):
    seen = []
    run = Batches(lambda op, md, data: seen.append(md.watermark), vectorized=vectorized,
                  event_time="ts", delay_ms=1_000)
    run.run(0, rows(("a", 1), ts=[10_000]))
    run.run(0, rows(("a", 1), ts=[30_000]))
    run.run(0, rows(("a", 1), ts=[20_000]))
    assert seen == [None, 9_000, 29_000]
    processing = []
    Batches(lambda op, md, data: processing.append(md.watermark)).run(5, rows(("a", 1)))
    assert processing == [None]  # processing time: no watermark
