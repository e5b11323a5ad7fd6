"""Typed storage of each state type, without Spark or a table: what :class:`TypedEncoding` writes
for a run's changes, read back by key through a loader over those rows, gives back the values
set (as objects, and as numbers for a state held in columns); misfits are refused by key."""

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from state import EncodingError
from state.contract.keygroups import typed_key_groups
from state.contract.types import declared
from state.read.found import Found
from state.run.columns import ColumnValues
from state.run.encodings import TypedEncoding
from state.run.objects import ObjectValues

CASES = [
    (int, [3, -2**63, 2**63 - 1]),
    (float, [0.5, -1e300, float("nan")]),
    (bool, [True, False, True]),
    (str, ["a", "é\"\\", ""]),
    (pd.Timestamp, [pd.Timestamp("2026-11-28 12:00", tz="UTC"),
                    pd.Timestamp("1970-01-01 00:00:00.000001", tz="UTC"),
                    pd.Timestamp("2026-01-01 05:00", tz="America/New_York")]),
    ({"n": int, "mean": float, "last": str}, [{"n": 1, "mean": 0.5, "last": "x"},
                                              {"n": 2, "mean": None, "last": "y"},
                                              {"n": 3, "mean": 2.0, "last": None}]),
]


def loader_over(rows: pa.Table):
    """A typed loader over committed change rows: each asked key's row, when it holds a value."""
    def load(keys, key_column, value_columns):
        live = rows.filter(pc.invert(rows["deleted"]))
        if keys is not None:
            live = live.filter(pc.is_in(live[key_column], value_set=keys))
        return Found.placed(keys, live.select([key_column, *value_columns]), key_column)
    return load


@pytest.mark.parametrize("spec, values", CASES, ids=lambda case: str(case)[:20])
@pytest.mark.parametrize("keys", [[10, 20, 30], ["a", "b", "é"]])
def test_each_type_reads_back_what_was_set(spec, values, keys):
    state_type = declared(spec)
    writer = ObjectValues("s", None, TypedEncoding("s", state_type, key_type=None, key_groups=256,
                                                   loader=None))
    writer.set_values(keys, values)
    writer.set_values(["x" if isinstance(keys[0], str) else 99], [values[0]])
    writer.delete_many([keys[0]])  # never checkpointed: no row for it
    rows = writer.changed_rows()
    assert sorted(rows["k__s"].to_pylist()) == sorted(keys[1:] + ["x" if isinstance(keys[0], str)
                                                                  else 99])
    assert rows["key_group"].to_numpy().tolist() == typed_key_groups(rows["k__s"], 256).tolist()

    reader = ObjectValues("s", None, TypedEncoding("s", state_type, key_type=rows["k__s"].type,
                                                   key_groups=256, loader=loader_over(rows)))
    got = reader.get_values(keys)
    assert got[0] is None  # deleted before any checkpoint: never stored
    for value, back in zip(values[1:], got[1:]):
        if spec is pd.Timestamp:
            assert back == value and str(back.tz) == "UTC"
        elif isinstance(value, float) and np.isnan(value):
            assert np.isnan(back)
        elif isinstance(spec, dict):
            assert back == {name: value.get(name) for name in spec}
        else:
            assert back == value and type(back) is type(value)


def test_a_column_held_state_writes_and_reads_numbers_without_objects():
    encoding = TypedEncoding("sum", declared(float), key_type=None, key_groups=256, loader=None)
    held = ColumnValues("sum", 0.0, encoding)
    held.set_many(pd.Series([1.5, 2.5], index=[7, 8]))
    held.delete_many([8])
    rows = held.changed_rows()
    assert rows.select(["k__sum", "v__sum", "deleted"]).to_pylist() == [
        {"k__sum": 7, "v__sum": 1.5, "deleted": False}]

    again = ColumnValues("sum", 0.0, TypedEncoding("sum", declared(float), key_type=pa.int64(),
                                                   key_groups=256, loader=loader_over(rows)))
    assert again.get_many(pd.Index([7, 8])).tolist() == [1.5, 0.0]


@pytest.mark.parametrize("spec, value", [(int, 1.5), (int, True), (float, "1"), (str, 3),
                                         ({"n": int}, {"n": 1, "other": 2}), (bool, 1)])
def test_a_value_that_does_not_fit_is_refused_naming_its_key(spec, value):
    held = ObjectValues("s", None, TypedEncoding("s", declared(spec), key_type=None,
                                                 key_groups=256, loader=None))
    held.set_values([5], [value])
    with pytest.raises(EncodingError, match=r"operator 's' for key 5: .* does not fit"):
        held.encode_changes()


@pytest.mark.parametrize("keys", [[1.5], [(1, 2)], [dt.date(2026, 1, 1)], [None]])
def test_a_key_that_is_not_one_int_or_string_is_refused(keys):
    held = ObjectValues("s", None, TypedEncoding("s", declared(int), key_type=None,
                                                 key_groups=256, loader=None))
    held.set_values(keys, [1])
    with pytest.raises(EncodingError, match="not such a key"):
        held.encode_changes()


def test_keys_of_another_type_than_stored_are_refused():
    held = ObjectValues("s", None, TypedEncoding("s", declared(int), key_type=pa.int64(),
                                                 key_groups=256, loader=None))
    held.set_values(["a"], [1])
    with pytest.raises(EncodingError, match="its stored keys are int64"):
        held.encode_changes()
