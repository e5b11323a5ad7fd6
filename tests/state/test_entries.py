"""A state of many rows per key (a list's elements, a map's entries): committed with a
checkpoint, each change one row; read back per key by delta-rs and through Spark alike, on the
driver and by an executor's key groups; compacted to the live entries."""

import datetime as dt

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from state import (
    CheckpointLog,
    EntryColumns,
    Expiring,
    PipelineLayout,
    StateStore,
    key_group,
    new_checkpoint,
    value_json,
)
from state.lake import tables
from state.offline import compact, reset_checkpoint
from state.read.lookup import stored_entries
from state.read.queries import read_state

NAME = "tops.recent"
#: the list's entries and their values pickled (a value no plain column holds)
PICKLED = EntryColumns("k__tops__recent")


def _commit(spark, layout, store, previous=None):
    checkpoint = new_checkpoint(previous, batch_id=(previous.batch_id + 1 if previous else 1),
                                offsets={}, tracked={}, markers={}, run_id="r")
    CheckpointLog(spark, layout).commit_changes(checkpoint, store.take_changes())
    return checkpoint


@pytest.fixture
def two_checkpoints(spark, tmp_path):
    """Checkpoint 1: a's entries 0, 1, 2 and b's 0; checkpoint 2: a's 0 removed and 3 added,
    b's 0 changed."""
    layout = PipelineLayout(str(tmp_path), "tops")
    store = StateStore(spark, layout, None)
    entries = store.entries(NAME, PICKLED)
    for at, value in enumerate(["x", "y", "z"]):
        entries.put("a", str(at), (value,))
    entries.put("b", "0", ("p",))
    first = _commit(spark, layout, store)
    entries.remove("a", "0")
    entries.put("a", "3", ("w",))
    entries.put("b", "0", ("q",))
    assert entries.changed_keys == 3  # what the second checkpoint writes: three rows
    second = _commit(spark, layout, store, first)
    return layout, first, second


def _held(store, key):
    return dict(store.entries(NAME, PICKLED).entries(key))


def test_a_run_reads_each_key_s_entries_as_of_its_checkpoint(spark, two_checkpoints):
    layout, first, second = two_checkpoints
    rows = tables.read(spark, layout.state).where(f"operator = '{NAME}'")
    assert rows.where("checkpoint_id = 2").count() == 3  # the changed entries, not the list
    assert {row["key_group"] for row in rows.select("key_group").collect()} == \
        {key_group('"a"', 256), key_group('"b"', 256)}  # an entry's group is its key's
    late = StateStore(spark, layout, second.checkpoint_id)
    assert _held(late, "a") == {"1": ("y",), "2": ("z",), "3": ("w",)}
    assert _held(late, "b") == {"0": ("q",)} and _held(late, "c") == {}
    early = StateStore(spark, layout, first.checkpoint_id)
    assert _held(early, "a") == {"0": ("x",), "1": ("y",), "2": ("z",)}


def test_spark_reads_the_same_entries_as_delta_rs(spark, two_checkpoints):
    layout, _, second = two_checkpoints
    read = read_state(spark, layout, NAME, codec="pickle", entries=PICKLED)
    assert read[["key", "entry", "value"]].values.tolist() == [
        ["a", "1", ("y",)], ["a", "2", ("z",)], ["a", "3", ("w",)], ["b", "0", ("q",)]]
    found = stored_entries(layout.state, NAME, second.checkpoint_id, None, 256, PICKLED)
    assert sorted(zip(found["key"].to_pylist(), found[PICKLED.entry].to_pylist())) == \
        [('"a"', "1"), ('"a"', "2"), ('"a"', "3"), ('"b"', "0")]


def test_an_executor_reads_only_its_key_groups(spark, two_checkpoints):
    layout, _, second = two_checkpoints
    group = key_group('"a"', 256)
    store = StateStore.of_files(layout.state, second.checkpoint_id, 256, (group, group + 1))
    assert key_group('"b"', 256) != group
    assert set(_held(store, "a")) == {"1", "2", "3"}
    assert _held(store, "b") == {}  # another task's key: not in the files of a's group


def test_compaction_keeps_the_live_entries_only(spark, two_checkpoints):
    layout, _, second = two_checkpoints
    compact(spark, layout)
    rows = tables.read(spark, layout.state).where(f"operator = '{NAME}'")
    assert rows.count() == 4 and rows.where("deleted").count() == 0
    assert _held(StateStore(spark, layout, second.checkpoint_id), "a") == \
        {"1": ("y",), "2": ("z",), "3": ("w",)}


def test_an_entry_that_does_not_encode_fails_before_the_commit(spark, tmp_path):
    store = StateStore(spark, PipelineLayout(str(tmp_path), "bad"), None)
    store.entries(NAME, PICKLED, codec="json").put("a", "0", object())
    with pytest.raises(Exception, match="tops.recent.*'a'"):
        store.encode_changes()


def test_a_reset_gives_back_the_entries_of_the_older_checkpoint(spark, two_checkpoints):
    layout, first, _ = two_checkpoints
    reset = reset_checkpoint(spark, layout, first.checkpoint_id, run_id="reset")
    store = StateStore(spark, layout, reset.checkpoint_id)
    assert _held(store, "a") == {"0": ("x",), "1": ("y",), "2": ("z",)}  # 0 back, 3 gone
    assert _held(store, "b") == {"0": ("p",)}


#: a list of (x double, at timestamp) with a TTL: its fields in typed columns, its stamp too
TYPED = EntryColumns("k__tops__best", (("x", "v__tops__best__x", pa.float64()),
                                       ("at", "v__tops__best__at", pa.timestamp("us", tz="UTC"))),
                     "v__tops__best___expires")


def test_a_typed_value_is_stored_in_its_columns_and_read_back_alike(spark, tmp_path):
    layout = PipelineLayout(str(tmp_path), "typed")
    store = StateStore(spark, layout, None)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    best = store.entries("tops.best", TYPED)
    best.put("a", "0", (1.5, at))
    best.put("a", "1", Expiring((2.5, at), 99))
    checkpoint = _commit(spark, layout, store)
    rows = DeltaTable(layout.state).to_pyarrow_table(filters=[("operator", "=", "tops.best")])
    assert sorted(rows["v__tops__best__x"].to_pylist()) == [1.5, 2.5]  # any engine reads these
    assert rows["value"].null_count == rows.num_rows
    assert sorted(rows["v__tops__best___expires"].to_pylist(), key=str) == [99, None]
    for reader in (StateStore(spark, layout, checkpoint.checkpoint_id),  # delta-rs
                   StateStore.of_rows(pd.DataFrame({  # through Spark, as an executor gets them
                       "operator": "tops.best", "key": ['"a"', '"a"'], "entry": ["0", "1"],
                       "value": value_json(rows.sort_by(TYPED.entry), TYPED)}))):
        assert dict(reader.entries("tops.best", TYPED).entries("a")) == \
            {"0": (1.5, at), "1": Expiring((2.5, at), 99)}
    read = read_state(spark, layout, "tops.best", entries=TYPED)
    assert read["value"].tolist() == [(1.5, at), (2.5, at)]


def test_a_value_of_another_type_fails_naming_its_key_before_the_commit(spark, tmp_path):
    store = StateStore(spark, PipelineLayout(str(tmp_path), "bad"), None)
    store.entries("tops.best", TYPED).put("a", "0", ("many", None))
    with pytest.raises(Exception, match=r"tops.best.*'a'.*field 'x' is double"):
        store.encode_changes()
