"""Managed state through runs: keys, codecs, failures, checkpoint policies, the tables' first
commits, tracked variables, hooks, user-defined stateful operators, global storage and
tombstones. Reading state as of a checkpoint, compaction and vacuum are in
``tests/ops/operating/test_operations.py``."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from delta.tables import DeltaTable

import ops as sp
from state import CheckpointLog, EncodingError
from state.lake import tables
from tests.helpers import sink_rows


def _keyed(pipeline_name, fn, key="k", schema=None, **map_args):
    schema = schema or {"k": "long", "x": "long"}
    return (sp.read.from_callback("in", key=key, schema=schema, max_versions=1)
            .map(fn, state=map_args.pop("state", 0), **map_args)
            .write.to_delta("out")).named(pipeline_name)


def add_x(op, md, data):
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


def add_x_vectorized(op, md, data):
    previous = sp.get(op, md)                       # Series indexed by key
    running = data.groupby("k", sort=False)["x"].cumsum() + data["k"].map(previous)
    sp.set(op, md, running.groupby(data["k"]).last().astype(int))
    return data.assign(total=running.astype("int64"))


def test_per_key_and_vectorized_agree_on_10k_keys(spark, warehouse):
    rng = np.random.default_rng(7)
    batches = [pd.DataFrame({"k": rng.integers(0, 10_000, 20_000), "x": rng.integers(-50, 50, 20_000)})
               for _ in range(2)]
    per_key = _keyed("per_key", add_x, name="sum")
    vectorized = _keyed("vectorized", add_x_vectorized, name="sum", vectorized=True)
    for pipeline in (per_key, vectorized):
        for batch in batches:
            pipeline.publish(spark, batch, warehouse)
        assert len(pipeline.run_once(spark, warehouse).batches) == 2

    a, b = (sink_rows(spark, p, warehouse, "out") for p in (per_key, vectorized))
    assert len(a) == 40_000
    pd.testing.assert_frame_equal(a[["k", "x", "total", "_batch_id", "_row"]],
                                  b[["k", "x", "total", "_batch_id", "_row"]])
    state_a, state_b = (sp.read_state(spark, p, "sum", warehouse=warehouse) for p in (per_key, vectorized))
    assert len(state_a) == len(set(pd.concat(batches)["k"]))
    pd.testing.assert_frame_equal(state_a, state_b)
    expected = pd.concat(batches).groupby("k")["x"].sum()
    assert dict(zip(state_a["key"], state_a["value"])) == expected.to_dict()


def test_string_and_tuple_keys(spark, warehouse):
    schema = {"s": "string", "n": "long", "x": "long"}
    by_string = _keyed("by_string", add_x, key="s", schema=schema)
    by_pair = _keyed("by_pair", add_x, key=("s", "n"), schema=schema)
    rows = [{"s": "a", "n": 1, "x": 1}, {"s": "a", "n": 2, "x": 2}, {"s": "0", "n": 1, "x": 3},
            {"s": "a", "n": 1, "x": 4}]
    for pipeline in (by_string, by_pair):
        pipeline.publish(spark, rows, warehouse)
        pipeline.run_once(spark, warehouse)
    assert list(sink_rows(spark, by_string, warehouse, "out")["total"]) == [1, 3, 3, 7]
    assert list(sink_rows(spark, by_pair, warehouse, "out")["total"]) == [1, 2, 3, 5]
    pairs = sp.read_state(spark, by_pair, "add_x", warehouse=warehouse)
    assert dict(zip(pairs["key"], pairs["value"])) == {("0", 1): 3, ("a", 1): 5, ("a", 2): 2}
    # keys are typed: the string "0" is not the integer 0
    assert sp.read_state(spark, by_string, "add_x", warehouse=warehouse)["key"].tolist() == ["0", "a"]


def test_mutable_initial_state_is_not_shared_between_keys(spark, warehouse):
    def collect(op, md, data):
        seen = sp.get(op, md)
        seen.extend(data["x"].tolist())
        sp.set(op, md, seen)
        return data.assign(n=len(seen))

    pipeline = _keyed("lists", collect, state=[])
    pipeline.publish(spark, [{"k": 1, "x": 1}, {"k": 2, "x": 2}, {"k": 1, "x": 3}], warehouse)
    pipeline.run_once(spark, warehouse)
    values = sp.read_state(spark, pipeline, "collect", warehouse=warehouse)
    assert values["value"].tolist() == [[1, 3], [2]]


class Basket:
    def __init__(self, items):
        self.items = frozenset(items)

    def __eq__(self, other):
        return isinstance(other, Basket) and other.items == self.items


def test_pickle_codec_keeps_arbitrary_objects_across_runs(spark, warehouse):
    def basket(op, md, data):
        current = sp.get(op, md)
        sp.set(op, md, Basket(current.items | set(data["x"])))
        return data

    pipeline = _keyed("baskets", basket, state=Basket(()), codec="pickle")
    pipeline.publish(spark, [{"k": 1, "x": 5}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"k": 1, "x": 6}], warehouse)
    pipeline.run_once(spark, warehouse)  # second run loads state from Delta, not memory
    stored = sp.read_state(spark, pipeline, "basket", warehouse=warehouse)
    assert stored["value"].tolist() == [Basket({5, 6})]


def test_unencodable_value_fails_the_batch_naming_operator_and_key(spark, warehouse):
    def bad(op, md, data):
        sp.set(op, md, object())
        return data

    pipeline = _keyed("unencodable", bad, state_type="json")  # the codec's refusal
    pipeline.publish(spark, [{"k": 42, "x": 1}], warehouse)
    with pytest.raises(EncodingError, match=r"operator 'bad' for key 42 .*codec='pickle'"):
        pipeline.run_once(spark, warehouse)
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest() is None


def test_a_batch_whose_state_cannot_be_stored_writes_nothing(spark, warehouse):
    def bad_on_13(op, md, data):
        sp.set(op, md, object() if (data["x"] == 13).any() else int(data["x"].sum()))
        return data

    pipeline = _keyed("unencodable_later", bad_on_13, name="bad")
    for x in (1, 13):  # one batch each
        pipeline.publish(spark, [{"k": 42, "x": x}], warehouse)
    with pytest.raises(EncodingError, match=r"operator 'bad' for key 42"):
        pipeline.run_once(spark, warehouse)
    # the sink is written behind the operators, yet batch 2's rows never reached it
    assert pipeline.read_sink(spark, "out", warehouse)["x"].tolist() == [1]
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 1


def test_failing_function_commits_nothing_and_next_run_retries(spark, warehouse):
    def fragile(op, md, data):
        if (data["x"] == 13).any():
            raise ValueError("unlucky")
        return add_x(op, md, data)

    pipeline = _keyed("fragile", fragile, name="sum")
    pipeline.publish(spark, [{"k": 1, "x": 1}], warehouse)
    pipeline.publish(spark, [{"k": 2, "x": 13}], warehouse)
    with pytest.raises(sp.OperatorError) as failure:
        pipeline.run_once(spark, warehouse)
    message = str(failure.value)
    assert all(part in message for part in
               ("'fragile'", "operator 'sum'", "batch 2", "key 2", "ValueError: unlucky"))
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 1
    assert sink_rows(spark, pipeline, warehouse, "out")["_batch_id"].tolist() == [1]

    fixed = dataclasses.replace(pipeline, stream=_keyed("fragile", add_x, name="sum").stream)
    report = fixed.run_once(spark, warehouse)
    assert [b.replayed for b in report.batches] == [True]  # batch 2 reused its recorded plan
    assert sink_rows(spark, pipeline, warehouse, "out")["total"].tolist() == [1, 13]


def test_checkpoint_every_n_batches_holds_state_in_memory_between(spark, warehouse):
    pipeline = _keyed("every3", add_x).checkpoint_every(batches=3)
    for x in range(1, 6):
        pipeline.publish(spark, [{"k": 1, "x": x}], warehouse)
    report = pipeline.run_once(spark, warehouse)
    assert len(report.batches) == 5 and report.checkpoint_id == 2  # after batch 3, and at the end
    log = CheckpointLog(spark, pipeline.layout(warehouse))
    assert [log.get(c).batch_id for c in (1, 2)] == [3, 5]
    assert sp.read_state(spark, pipeline, "add_x", as_of=1, warehouse=warehouse)["value"].tolist() == [6]
    assert sp.read_state(spark, pipeline, "add_x", warehouse=warehouse)["value"].tolist() == [15]


def test_distributed_mode_checkpoints_every_batch_and_says_so(spark, warehouse, caplog):
    """Its state lives only in `_state`, where the next batch's tasks read it: the policy,
    which would hold state in memory between batches, is driver mode's."""
    pipeline = _keyed("every3_distributed", add_x).checkpoint_every(batches=3).with_mode("distributed")
    for x in (1, 2):
        pipeline.publish(spark, [{"k": 1, "x": x}], warehouse)
    with caplog.at_level("INFO", logger="ops.runtime"):
        report = pipeline.run_once(spark, warehouse)
    assert len(report.batches) == 2 and report.checkpoint_id == 2
    assert "distributed mode checkpoints every batch" in caplog.text
    assert sp.read_state(spark, pipeline, "add_x", as_of=1, warehouse=warehouse)["value"].tolist() == [1]


def test_a_pipelines_tables_are_created_by_their_first_commit(spark, warehouse):
    pipeline = _keyed("first_commits", add_x, state_type="json")  # typed: its columns' commit first
    layout = pipeline.layout(warehouse)
    assert pipeline.run_once(spark, warehouse).checkpoint_id is None   # nothing to read yet
    assert not any(tables.exists(spark, path)
                   for path in (layout.state, layout.batches, layout.dead_letters))
    pipeline.publish(spark, [{"k": 1, "x": 2}], warehouse)
    pipeline.publish(spark, [{"k": 1, "x": 3}], warehouse)
    assert pipeline.run_once(spark, warehouse).checkpoint_id == 2
    for path, operations in ((layout.state, ["WRITE", "WRITE"]), (layout.batches, ["WRITE"])):
        history = DeltaTable.forPath(spark, path).history().orderBy("version").toPandas()
        assert history["operation"].tolist() == operations, path   # no empty creation commit
    detail = DeltaTable.forPath(spark, layout.state).detail().first()
    assert detail["partitionColumns"] == ["operator"]
    assert not tables.exists(spark, layout.dead_letters)   # no record was rejected
    assert sp.read_state(spark, pipeline, "add_x", warehouse=warehouse)["value"].tolist() == [5]


def test_checkpoint_every_t_seconds(spark, warehouse):
    pipeline = _keyed("timed", add_x).checkpoint_every(batches=None, seconds=0.001)
    for x in range(1, 4):
        pipeline.publish(spark, [{"k": 1, "x": x}], warehouse)
    assert pipeline.run_once(spark, warehouse).checkpoint_id == 3


def test_one_commit_per_checkpoint_with_only_changed_keys(spark, warehouse):
    pipeline = _keyed("commits", add_x, state_type="json")
    pipeline.publish(spark, [{"k": k, "x": 1} for k in range(100)], warehouse)
    pipeline.publish(spark, [{"k": 5, "x": 1}], warehouse)
    pipeline.run_once(spark, warehouse)
    layout = pipeline.layout(warehouse)
    commits = DeltaTable.forPath(spark, layout.state).history().orderBy("version").toPandas()
    assert commits["operation"].tolist() == ["WRITE", "WRITE"]  # one commit per checkpoint
    assert [json.loads(m)["checkpoint_id"] for m in commits["userMetadata"]] == [1, 2]
    state_rows = tables.read(spark, layout.state).where("operator = 'add_x'").groupBy(
        "checkpoint_id").count().orderBy("checkpoint_id").toPandas()
    assert state_rows["count"].tolist() == [100, 1]  # the second checkpoint wrote one key


def test_tracked_variables_and_hook_order(spark, warehouse):
    counter = sp.track("counter", {"rows": 0})
    calls = []

    class Recorder(sp.Hooks):
        def on_setup(self, ctx): calls.append("setup")
        def on_recover(self, ctx, marker): calls.append(f"recover:{marker}")
        def on_start(self, ctx): calls.append(f"start:{counter.value['rows']}")
        def on_checkpoint(self, ctx):
            calls.append("checkpoint")
            return counter.value["rows"]
        def on_post_checkpoint(self, ctx, checkpoint_id): calls.append(f"post:{checkpoint_id}")
        def on_finish(self, ctx): calls.append("finish")
        def on_error(self, ctx, error): calls.append("error")
        def on_teardown(self, ctx): calls.append("teardown")

    def count(data):
        counter.value["rows"] += len(data)
        return data

    pipeline = ((sp.read.from_callback("in", schema={"x": "long"}).map(count)
                 .write.to_delta("out")).named("hooked").track(counter).with_hooks(Recorder()))
    pipeline.publish(spark, [{"x": 1}, {"x": 2}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert calls == ["setup", "recover:None", "start:0", "checkpoint", "post:1", "finish", "teardown"]

    counter.value = {"rows": -999}  # a restart: the value must come from the checkpoint
    calls.clear()
    pipeline.publish(spark, [{"x": 3}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert calls == ["setup", "recover:2", "start:2", "checkpoint", "post:2", "finish", "teardown"]
    assert counter.value == {"rows": 3}


class FirstSeen(sp.Operator):
    """A user-defined stateful operator: passes each key's first row only, ever."""

    name = "first_seen"

    def apply(self, scope, frame):
        seen = scope.store.operator(self.name, initial=False)
        keys = frame["k"].tolist()
        seen.prefetch(keys)
        keep = []
        for key in keys:
            keep.append(not seen.get(key))
            seen.set(key, True)
        return frame[keep]


def test_user_defined_stateful_operator_and_sql_readable_state(spark, warehouse):
    pipeline = ((sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
                 .via(FirstSeen()).write.to_delta("out")).named("dedupe"))
    pipeline.publish(spark, [{"k": 1, "x": 1}, {"k": 1, "x": 2}, {"k": 2, "x": 3}], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"k": 2, "x": 4}, {"k": 3, "x": 5}], warehouse)
    pipeline.run_once(spark, warehouse)
    assert sink_rows(spark, pipeline, warehouse, "out")["x"].tolist() == [1, 3, 5]
    state_table = pipeline.layout(warehouse).state
    readable = spark.sql(
        f"SELECT DISTINCT key, CAST(value AS BOOLEAN) AS seen FROM delta.`{state_table}` "
        "WHERE operator = 'first_seen' ORDER BY key").toPandas()
    assert readable.values.tolist() == [["1", True], ["2", True], ["3", True]]


def test_global_storage_is_shared_by_operators_and_restored_after_a_restart(spark, warehouse):
    def count_rows(op, md, data):  # every operator adds its rows to one pipeline-wide count
        rows = sp.set(None, {"key": "rows"}, (sp.get(None, {"key": "rows"}) or 0) + len(data))
        return data.assign(**{op.name: rows})

    def build():
        return (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
                .map(count_rows, state=0, name="first").map(count_rows, state=0, name="second")
                .write.to_delta("out")).named("global_count")

    build().publish(spark, [{"k": 1, "x": 1}, {"k": 2, "x": 1}], warehouse)
    build().run_once(spark, warehouse)
    build().publish(spark, [{"k": 3, "x": 1}], warehouse)
    build().run_once(spark, warehouse)  # a new run: the count comes back from the checkpoint

    out = build().read_sink(spark, "out", warehouse)
    assert out[["first", "second"]].values.tolist() == [[1, 3], [2, 4], [5, 6]]
    stored = sp.read_state(spark, build(), "__global__", warehouse=warehouse)
    assert dict(zip(stored["key"], stored["value"])) == {"rows": 6}


@pytest.mark.parametrize("mode, vectorized", [("driver", False), ("driver", True),
                                              ("distributed", False), ("distributed", True)])
def test_remove_drops_a_key_from_state_with_a_tombstone(spark, warehouse, mode, vectorized):
    def total_until_zero(op, md, data):  # a key whose total comes back to 0 holds nothing
        if vectorized:
            totals = sp.get(op, md) + data.groupby("k")["x"].sum()
            sp.set(op, md, totals[totals != 0])
            sp.remove(op, md, totals.index[totals == 0])
            return None
        total = sp.get(op, md) + int(data["x"].sum())
        sp.set(op, md, total) if total else sp.remove(op, md)
        return None

    pipeline = _keyed(f"removing_{mode}_{vectorized}", total_until_zero, name="sum",
                      vectorized=vectorized, state_type="json").with_mode(mode)  # text rows
    pipeline.publish(spark, [{"k": 1, "x": 5}, {"k": 2, "x": 3}], warehouse)
    pipeline.publish(spark, [{"k": 1, "x": -5}, {"k": 2, "x": 1}], warehouse)
    pipeline.run_once(spark, warehouse, max_batches=1)  # 1 is checkpointed with a value
    assert len(pipeline.run_once(spark, warehouse).batches) == 1

    state = sp.read_state(spark, pipeline, "sum", warehouse=warehouse)
    assert dict(zip(state["key"], state["value"])) == {2: 4}  # no row for 1, not a null one
    rows = (spark.read.format("delta").load(pipeline.layout(warehouse).state)
            .where("operator = 'sum' AND key = '1'").orderBy("checkpoint_id").toPandas())
    assert rows["deleted"].tolist()[-1] and rows["value"].isna().tolist()[-1]


def _unlucky(data):
    if (data["x"] == 13).any():
        raise ValueError("unlucky")


@pytest.mark.parametrize("mode, kind", [("driver", "map"), ("distributed", "map"),
                                        ("driver", "filter")])
def test_a_batch_failing_the_same_way_twice_says_where_what_and_the_ways_forward(
        spark, warehouse, mode, kind):
    def fragile(op, md, data):
        _unlucky(data)
        return add_x(op, md, data)

    def picky(data):
        _unlucky(data)
        return data["x"] > 0

    source = sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"}, max_versions=1)
    stream = (source.map(fragile, state=0, name="sum") if kind == "map"
              else source.filter(picky, name="sum"))
    pipeline = stream.write.to_delta("out").named(f"twice_{mode}_{kind}").with_mode(mode)
    pipeline.publish(spark, [{"k": 1, "x": 1}], warehouse)
    pipeline.publish(spark, [{"k": 2, "x": 13}, {"k": 2, "x": 4}], warehouse)  # one task's
    with pytest.raises(sp.OperatorError) as first:
        pipeline.run_once(spark, warehouse)
    assert "unlucky" in str(first.value) and "again" not in str(first.value)
    with pytest.raises(sp.OperatorError) as second:  # the next run replays batch 2: same rows
        pipeline.run_once(spark, warehouse)

    message = str(second.value)
    assert f"pipeline 'twice_{mode}_{kind}', batch 2 failed in operator 'sum' again (2 times" in message
    shown = message.split("The first rows that reached 'sum':\n")[1].split("\nWays forward")[0]
    header, *lines = shown.splitlines()  # the batch's rows, as they reached the operator
    assert header.split()[:2] == ["k", "x"] and [line.split()[-2:] for line in lines] == [
        ["2", "13"], ["2", "4"]]
    assert all(way in message for way in ("fix 'sum'", "sp.reset_to_checkpoint(", "sp.discard_plans("))
    assert "ValueError: unlucky" in message and isinstance(second.value.__cause__, sp.OperatorError)
    assert CheckpointLog(spark, pipeline.layout(warehouse)).latest().batch_id == 1
    recorded = tables.read(spark, pipeline.layout(warehouse).failures).toPandas()
    assert recorded[["batch_id", "operator"]].values.tolist() == [[2, "sum"], [2, "sum"]]
