"""Reading a batch's keys' state from ``_state``'s files (state.read.lookup), against Spark's reading
of the same changelog: every checkpoint, deletions, compaction, key-group ranges, and a table
delta-rs must not read by its files."""

import itertools

import pyarrow as pa
import pytest

import ops as sp
from state import StateStore, delta_io, encode_key, key_group
from state.lake import tables
from state.offline import compact as state_compact
from state.read.lookup import stored_values
from tests.state.test_key_groups import as_before_key_groups
from tests.state.test_key_groups import pipeline as grouped_pipeline


def keep_or_forget(op, md, data):
    """A running sum per key that forgets a key when its total passes 100."""
    total = sp.get(op, md) + int(data["x"].sum())
    if total > 100:  # a tombstone, as a closed window's or an expired key's
        op._state.delete(md.key)
    else:
        sp.set(op, md, total)
    return data.assign(total=total)


def pipeline():
    return (sp.read.from_callback("in", key="k", schema={"k": "long", "x": "long"})
            .map(keep_or_forget, state=0, name="sums", state_type="json")  # text lookups
            .write.to_delta("out")).named("lookup")


def spark_values(spark, built, warehouse, as_of):
    found = sp.read_state(spark, built, "sums", warehouse=warehouse, as_of=as_of)
    return {encode_key(k): str(v) for k, v in zip(found["key"], found["value"])}


def file_values(layout, as_of, keys=None, within=None):
    found = stored_values(layout.state, "sums", as_of, keys, 256, within)
    assert found is not None
    return dict(zip(found.rows["key"].to_pylist(), found.rows["value"].to_pylist()))


@pytest.fixture
def three_checkpoints(spark, warehouse):
    built = pipeline()
    for batch in ([{"k": k, "x": 1} for k in range(50)],
                  [{"k": k, "x": 60} for k in range(0, 50, 2)],       # 25 keys to 61
                  [{"k": k, "x": 50} for k in range(0, 50, 4)] + [{"k": 99, "x": 7}]):  # 13 deleted
        built.publish(spark, batch, warehouse)
        built.run_once(spark, warehouse)
    return built


def test_every_checkpoint_reads_as_spark_reads_it(spark, warehouse, three_checkpoints):
    layout = three_checkpoints.layout(warehouse)
    for as_of in (1, 2, 3):
        assert file_values(layout, as_of) == spark_values(spark, three_checkpoints, warehouse, as_of)
    latest = file_values(layout, 3)
    assert len(latest) == 50 - 13 + 1 and "0" not in latest and latest["2"] == "61"
    assert latest["99"] == "7" and latest["1"] == "1"


def test_only_the_keys_asked_for_and_none_for_keys_never_stored(spark, warehouse, three_checkpoints):
    layout = three_checkpoints.layout(warehouse)
    assert file_values(layout, 3, keys=["2", "4", "5", "12345"]) == {"2": "61", "5": "1"}
    assert file_values(layout, 1, keys=["4", "99"]) == {"4": "1"}  # 4 deleted later, 99 came later


def test_after_compaction_a_range_of_key_groups_reads_only_its_files(spark, warehouse, three_checkpoints):
    layout = three_checkpoints.layout(warehouse)
    before = file_values(layout, 3)
    state_compact(spark, layout, rows_per_file=5)
    assert file_values(layout, 3) == before
    files = delta_io.file_statistics(layout.state)
    ours = files.filter(pa.compute.equal(files["partition.operator"], "sums"))
    first_quarter = {k: v for k, v in before.items() if key_group(k, 256) < 64}
    assert first_quarter and file_values(layout, 3, within=(0, 64)) == first_quarter
    lows = ours["min.key_group"].to_pylist()
    assert len(ours) >= 6 and sum(low < 64 for low in lows) < len(ours)  # files were skipped


def test_an_executor_store_reads_its_groups_from_the_files(spark, warehouse, three_checkpoints):
    layout = three_checkpoints.layout(warehouse)
    store = StateStore.of_files(layout.state, 2, 256, (0, 256))
    assert store.handed_in and store.spark is None
    assert store.operator("sums", 0).get_values([0, 1, 2, 99]) == [61, 1, 61, 0]


def test_stored_numbers_and_other_values_decode_as_json_does(spark, warehouse):
    built = (sp.read.from_callback("in", key="k", schema={"k": "string", "x": "double"})
             .map(set_value, state=None, name="sums")
             .write.to_delta("out")).named("decoding")
    built.publish(spark, [{"k": k, "x": 1.0} for k in VALUES], warehouse)
    built.run_once(spark, warehouse)
    store = StateStore(spark, built.layout(warehouse), 1)
    assert store.operator("sums").get_values(list(VALUES)) == list(VALUES.values())


def set_value(op, md, data):
    sp.set(op, md, VALUES[md.key])
    return data


VALUES = {"int": 3, "big": 2**70, "float": 1.5, "exp": 1e300, "list": [1, 2], "text": "x",
          "none": None, "negative": -4}


def test_a_table_delta_rs_cannot_read_by_its_files_is_left_to_spark(spark, tmp_path):
    path = str(tmp_path / "dv")
    spark.createDataFrame([("sums", "1", "5", False, 1, 0)],
                          "operator string, key string, value string, deleted boolean, "
                          "checkpoint_id long, key_group int").write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(path)
    assert tables.exists(spark, path)
    assert stored_values(path, "sums", 1, None, 256) is None


def test_a_state_from_before_key_groups_reads_by_group_range_too(spark, warehouse):
    old = grouped_pipeline()
    old.publish(spark, [{"k": f"key{n}", "x": n} for n in range(40)], warehouse)
    old.run_once(spark, warehouse)
    as_before_key_groups(spark, warehouse)
    path = old.layout(warehouse).state
    assert "key_group" not in tables.columns(path)
    low = {f"key{n}": n for n in range(40) if key_group(encode_key(f"key{n}"), 256) < 128}
    store = StateStore.of_files(path, 1, 256, (0, 128))
    assert 0 < len(low) < 40
    assert dict(zip(*_held(store.operator("running_sum", 0)))) == low


def _held(state):
    keys = state.held_keys()
    return keys, state.get_values(keys)


@pytest.mark.parametrize("keys", [
    [*map(str, range(-20, 40)), str(2**63 - 1), str(-2**63)],  # ints: read as int64s
    [encode_key(f"user-{n}") for n in range(60)],        # text: read as text
    [*map(str, range(30)), *(encode_key(str(n)) for n in range(30))],  # both, one operator
    ["7", "007", "+7", "70", "-0", "0"],                 # texts an int cast would also take
])
def test_the_newest_row_per_key_up_to_a_checkpoint_whatever_the_keys(tmp_path, keys):
    import random

    from deltalake import write_deltalake
    chance = random.Random(len(keys))
    rows = [{"operator": "sums", "key": key, "value": str(chance.randrange(100)),
             "deleted": chance.random() < 0.2, "checkpoint_id": checkpoint,
             "key_group": key_group(key, 256)}
            for checkpoint in (1, 2, 3) for key in keys if chance.random() < 0.6]
    path = str(tmp_path / "_state")
    write_deltalake(path, pa.Table.from_pylist(rows), partition_by=["operator"])
    some = chance.sample(keys, len(keys) // 2) + ["12345", '"never"']
    for as_of, wanted, within in itertools.product((1, 2, 3), (None, some), (None, (0, 128))):
        newest = {}
        for row in rows:  # the oracle: the last row up to as_of of each key asked for
            if row["checkpoint_id"] <= as_of and (wanted is None or row["key"] in wanted) and (
                    within is None or within[0] <= row["key_group"] < within[1]):
                newest[row["key"]] = row
        expected = {key: row["value"] for key, row in newest.items() if not row["deleted"]}
        found = stored_values(path, "sums", as_of, wanted, 256, within)
        held = found.rows["key"].to_pylist()
        assert dict(zip(held, found.rows["value"].to_pylist())) == expected, (as_of, wanted, within)
        if wanted is not None:  # in the order asked
            assert held == [key for key, holds in zip(wanted, found.holding) if holds]
