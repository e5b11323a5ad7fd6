"""State types (state/contract/types.py): what is inferred from values and declared, what a type stores
exactly, and what it refuses, with the reason."""

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from state.contract.types import SCALARS, StateType, declared, infer

INT64 = st.integers(-(2**63), 2**63 - 1)
SCALAR_VALUES = {
    "int64": INT64,
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "string": st.text(),
    "timestamp": st.datetimes(timezones=st.just(dt.UTC)),
}
FIELD_NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)


@st.composite
def typed_values(draw):
    """A type (a scalar or a record) and a list of values of it, nulls among them."""
    if draw(st.booleans()):
        scalar = draw(st.sampled_from(sorted(SCALARS)))
        values = st.one_of(st.none(), SCALAR_VALUES[scalar])
        return StateType((("", scalar),)), draw(st.lists(values, min_size=1, max_size=5))
    names = draw(st.lists(FIELD_NAMES, min_size=1, max_size=4, unique_by=str.lower))
    scalars = [draw(st.sampled_from(sorted(SCALARS))) for _ in names]
    record = st.fixed_dictionaries({name: st.one_of(st.none(), SCALAR_VALUES[scalar])
                                    for name, scalar in zip(names, scalars)})
    return StateType(tuple(zip(names, scalars))), draw(st.lists(record, min_size=1, max_size=5))


@given(typed_values())
def test_values_of_a_type_fit_it_and_round_trip_through_its_arrow_columns(typed):
    state_type, values = typed
    assert state_type.first_misfit(values) is None
    assert StateType.described(state_type.describe()) == state_type
    fields = state_type.arrow_fields("v__s")
    for name, field in zip((name for name, _ in state_type.fields), fields):
        column = [value.get(name) if state_type.is_record else value for value in values]
        stored = pa.array(column, field.type)
        assert stored.to_pylist() == column
        assert field.nullable


@given(st.sampled_from(sorted(SCALARS)).flatmap(
    lambda scalar: st.tuples(st.just(scalar), SCALAR_VALUES[scalar])))
def test_a_scalar_value_infers_its_own_type(scalar_and_value):
    scalar, value = scalar_and_value
    assert infer(value).describe() == scalar
    assert infer({"field": value}).describe() == {"field": scalar}


@pytest.mark.parametrize("value,expected", [
    (np.int32(7), "int64"), (np.float32(0.5), "float64"), (np.bool_(True), "bool"),
    (pd.Timestamp("2026-01-01"), "timestamp"), (dt.datetime(2026, 1, 1), "timestamp"),
    (True, "bool"),  # not an int, though Python says it is
])
def test_numpy_and_pandas_scalars_infer_like_python_ones(value, expected):
    assert infer(value).describe() == expected


@pytest.mark.parametrize("value", [None, [1, 2], (1, 2), {"a": [1]}, {"a": {"b": 1}}, {},
                                   {"not a column": 1}, {1: 2}, 2**63, object(), b"bytes"])
def test_values_of_no_fixed_type_infer_none(value):
    assert infer(value) is None


@pytest.mark.parametrize("state_type,values,misfit", [
    (int, [1, True], 1),                       # a bool is not an int
    (int, [1, 2.0], 1),                        # nor a float, even a whole one
    (float, [0.5, 2**53, 2**53 + 1], 2),       # an int fits a float only when exact there
    (bool, [False, 0], 1),
    (str, ["a", 1], 1),
    (pd.Timestamp, [pd.Timestamp("2026-01-01"), "2026-01-01"], 1),
    ({"n": int}, [{"n": 1}, {"n": 1, "extra": 2}], 1),  # a field the record lacks
    ({"n": int}, [{}, {"n": None}, 5], 2),               # missing and null fields fit
])
def test_values_that_do_not_fit_are_found_by_position(state_type, values, misfit):
    assert declared(state_type).first_misfit(values) == misfit


def test_nulls_fit_every_type():
    for scalar in SCALARS:
        assert declared(scalar).first_misfit([None, pd.NaT]) is None


@pytest.mark.parametrize("spec,message", [
    (list, "is not a state type; use int, float, bool, str"),
    ("int", "is not a state type"),
    ({"n": dict}, "field 'n'"),
    ({"1n": int}, "field name is letters, digits and '_'"),
    ({"n": int, "N": float}, "repeat a name"),
    ({}, "at least one field"),
])
def test_a_declaration_that_names_no_type_is_refused_saying_what_is(spec, message):
    with pytest.raises(ValueError, match=message):
        declared(spec)


def test_json_declares_no_type_and_names_are_the_scalars_too():
    assert declared("json") is None and declared(None) is None
    assert declared("timestamp") == declared(pd.Timestamp) == declared(dt.datetime)
    assert declared({"n": "int64", "mean": float}).describe() == {"n": "int64", "mean": "float64"}
