"""A StatefulProcessor's list and map variables are stored a row per element and entry: a
checkpoint writes the elements and entries a batch changed, not the variable; a list or map a
key's record held (before this storage) becomes its entries when the key is next handled."""

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

import ops as sp
from ops.context import BatchScope
from ops.operators.spark_processor import TransformWithState
from state import StateStore, codec_named, encode_key
from state.lake import tables

SCHEMA = {"k": "string", "x": "long"}


class LastThreeAndCounts(StatefulProcessor):
    """Per key: the last three ``x`` (a "last N" put) and a count per ``x`` (one entry each)."""

    def init(self, handle):
        self.recent = handle.getListState("recent", "x long")
        self.counts = handle.getMapState("counts", "x long", "n long")

    def handleInputRows(self, key, rows, timerValues):
        for x in pd.concat(list(rows))["x"].tolist():
            self.recent.put([*list(self.recent.get())[-2:], (x,)])
            self.counts.updateValue((x,), ((self.counts.getValue((x,)) or (0,))[0] + 1,))
        yield pd.DataFrame({"k": [key[0]], "n": [len(list(self.recent.get()))]})


def _pipeline():
    return (sp.read.from_callback("in", key="k", schema=SCHEMA, max_versions=1).group_by("k")
            .transform_with_state(LastThreeAndCounts(), "k string, n long", name="tops")
            .write.to_delta("out")).named("stored_entries")


def _rows_of_last_checkpoint(spark, pipeline, warehouse, state):
    rows = tables.read(spark, pipeline.layout(warehouse).state).where(f"operator = '{state}'")
    last = rows.agg({"checkpoint_id": "max"}).first()[0]
    return rows.where(f"checkpoint_id = {last}").toPandas()


def test_a_checkpoint_writes_the_entries_that_changed(spark, warehouse):
    pipeline = _pipeline()
    pipeline.publish(spark, [{"k": "a", "x": x} for x in range(6)], warehouse)
    pipeline.run_once(spark, warehouse)
    pipeline.publish(spark, [{"k": "a", "x": 2}], warehouse)  # one more row of a
    pipeline.run_once(spark, warehouse)

    recent = _rows_of_last_checkpoint(spark, pipeline, warehouse, "tops.recent")
    # the "last three" put dropped the head and added one: a tombstone and a new element
    assert sorted(zip(recent["k__tops__recent"], recent["deleted"])) == [("3", True), ("6", False)]
    counts = _rows_of_last_checkpoint(spark, pipeline, warehouse, "tops.counts")
    assert counts["k__tops__counts"].tolist() == ["[2]"]  # the one entry updated
    held = sp.read_state(spark, pipeline, "tops.recent", warehouse=warehouse)
    assert held["value"].tolist() == [(4,), (5,), (2,)]
    counts = sp.read_state(spark, pipeline, "tops.counts", warehouse=warehouse)
    assert dict(zip(counts["entry"], counts["value"])) == \
        {"[0]": (1,), "[1]": (1,), "[2]": (2,), "[3]": (1,), "[4]": (1,), "[5]": (1,)}
    # the values are in typed columns: any engine reads them, without this library
    stored = tables.read(spark, pipeline.layout(warehouse).state).where("operator = 'tops.counts'")
    assert dict(stored.select("k__tops__counts", "v__tops__counts__n").where("not deleted")
                .groupBy("k__tops__counts").agg({"v__tops__counts__n": "max"}).collect()) == \
        {"[0]": 1, "[1]": 1, "[2]": 2, "[3]": 1, "[4]": 1, "[5]": 1}


def test_a_record_s_list_and_map_become_entries(spark):
    """A key's record from before this storage held its list and map: handled again, they
    are its entries, and its record keeps the value variables only."""
    operator = TransformWithState.of("tops", ("k",), LastThreeAndCounts(), "k string, n long",
                                     "append", "none", "pandas", None)
    pickle = codec_named("pickle")
    record = {"recent": [(7,), (8,)], "counts": {(7,): (1,), (8,): (1,)}}
    store = StateStore.of_rows(pd.DataFrame({"operator": ["tops"], "key": [encode_key("a")],
                                             "value": [pickle.encode(record)]}))
    scope = BatchScope(pipeline="p", batch_id=2, key_fields=("k",), store=store)
    out = operator.apply(scope, pd.DataFrame({"k": ["a"], "x": [9]}))
    assert out["n"].tolist() == [3]
    columns = dict(operator.declares().entries)
    recent = store.entries("tops.recent", columns["tops.recent"]).entries("a")
    assert [recent[entry] for entry in sorted(recent, key=int)] == [(7,), (8,), (9,)]
    assert dict(store.entries("tops.counts", columns["tops.counts"]).entries("a")) == \
        {"[7]": (1,), "[8]": (1,), "[9]": (1,)}
    assert store.operator("tops", None, "pickle").get_values(["a"]) == [None]  # nothing left
