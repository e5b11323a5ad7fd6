"""State types: what a state name's keys and values are, when every one has the same type, so
typed storage can keep them in ``_state`` columns of that type (docs/plans/typed-state.md).

A type is a scalar (``int64``, ``float64``, ``bool``, ``string``, ``timestamp``: microseconds,
UTC) or a flat record of scalars (``{"n": int64, "mean": float64}``). Anything else (a list, a
nested dict, an object) has no state type: it stays JSON or pickled text, as today. A type comes
from a declaration (:func:`declared`) or from a value (:func:`infer`); it is recorded in a
checkpoint by :meth:`StateType.describe` and read back by :meth:`StateType.described`.

>>> declared({"n": int, "mean": float}).describe()
{'n': 'int64', 'mean': 'float64'}
>>> infer(3).describe(), infer([1, 2])
('int64', None)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

#: The scalars and the Arrow type each is stored as (Spark, DuckDB and Trino read these as
#: bigint, double, boolean, string and timestamp).
SCALARS: dict[str, pa.DataType] = {
    "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
#: What a declaration may say for each scalar, besides its name.
_DECLARED = {int: "int64", float: "float64", bool: "bool", str: "string", pd.Timestamp: "timestamp",
             dt.datetime: "timestamp"}
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # a column name Delta takes without mapping
_INT64 = (-(2**63), 2**63 - 1)
_EXACT_FLOAT_INT = 2**53  # ints of a float64 state: exact below this


#: What starts the name of a ``_state`` column that holds a typed state's keys (``k__``) or
#: values (``v__``); ``key`` and ``value`` hold the untyped states' JSON or pickled text.
KEY_PREFIX, VALUE_PREFIX = "k__", "v__"


@dataclass(frozen=True)
class StateType:
    """A scalar (``fields == (("", scalar),)``) or a flat record of scalars, in field order."""

    fields: tuple[tuple[str, str], ...]

    @property
    def is_record(self) -> bool:
        return self.fields[0][0] != ""

    def describe(self) -> str | dict[str, str]:
        """As recorded in a checkpoint: the scalar's name, or ``{field: scalar}``."""
        return dict(self.fields) if self.is_record else self.fields[0][1]

    @classmethod
    def described(cls, description: str | dict[str, str]) -> StateType:
        """The type :meth:`describe` gave ``description`` for.

        >>> StateType.described({"n": "int64"}) == declared({"n": int})
        True
        """
        if isinstance(description, dict):
            return _record(description.items())
        return _scalar(description)

    def arrow_fields(self, column: str) -> list[pa.Field]:
        """The nullable Arrow columns of this type under ``column``: ``column`` itself for a
        scalar, ``column__<field>`` for each field of a record.

        >>> [f.name for f in declared({"n": int, "sum": float}).arrow_fields("v__total")]
        ['v__total__n', 'v__total__sum']
        """
        return [pa.field(f"{column}__{name}" if name else column, SCALARS[scalar])
                for name, scalar in self.fields]

    def columns(self, name: str, key_type: pa.DataType) -> list[pa.Field]:
        """The ``_state`` columns of state ``name`` of this type with keys of ``key_type``.

        >>> [f.name for f in declared({"n": int}).columns("total", pa.string())]
        ['k__total', 'v__total__n']
        """
        return [pa.field(KEY_PREFIX + name, key_type), *self.arrow_fields(VALUE_PREFIX + name)]

    def first_misfit(self, values: Iterable[Any]) -> int | None:
        """The position of the first of ``values`` this type cannot store exactly, or ``None``.
        Nulls fit (``None``, ``NaT``, a record's missing field). A bool is never an int, an int
        fits a float64 only when it is exact there, and a record takes dicts of its fields.

        >>> declared(int).first_misfit([1, 2, 3.5]), declared(float).first_misfit([1, 2.5])
        (2, None)
        """
        for position, value in enumerate(values):
            if not _null(value) and not self._fits(value):
                return position
        return None

    def _fits(self, value: Any) -> bool:
        if not self.is_record:
            return _fits_scalar(self.fields[0][1], value)
        return (isinstance(value, dict) and set(value) <= {name for name, _ in self.fields}
                and all(_null(value.get(name)) or _fits_scalar(scalar, value[name])
                        for name, scalar in self.fields))


@dataclass(frozen=True)
class StateTypes:
    """How one run stores its states: the type of each state name stored in typed columns (the
    others are JSON or pickled text), and, for the types inferred (from a map's ``state=``)
    rather than declared with ``state_type=``, what they were inferred from (errors name it).

    >>> run = StateTypes({"sum": declared(int)}, inferred={"sum": "state=0"})
    >>> run.of("sum").describe(), run.of("other"), run.origin("sum")
    ('int64', None, "state_type 'int64' inferred from state=0")
    """

    types: Mapping[str, StateType] = field(default_factory=dict)
    inferred: Mapping[str, str] = field(default_factory=dict)

    def of(self, name: str) -> StateType | None:
        """The type state ``name`` is stored as; ``None``: as text."""
        return self.types.get(name)

    def origin(self, name: str) -> str:
        """Where the type of typed state ``name`` comes from, as an error says it."""
        described = repr(self.types[name].describe())
        if name in self.inferred:
            return f"state_type {described} inferred from {self.inferred[name]}"
        return f"declared state_type {described}"


def key_columns(columns: Iterable[str]) -> list[str]:
    """The typed key columns among ``columns`` (a ``_state`` table's), in their order.

    >>> key_columns(["operator", "key", "k__sum", "v__sum"]), value_columns(["value", "v__sum"])
    (['k__sum'], ['v__sum'])
    """
    return [column for column in columns if column.startswith(KEY_PREFIX)]


def value_columns(columns: Iterable[str]) -> list[str]:
    """The typed value columns among ``columns`` (a ``_state`` table's), in their order."""
    return [column for column in columns if column.startswith(VALUE_PREFIX)]


def declared(spec: Any) -> StateType | None:
    """The type a ``state_type=`` declaration names: ``int``, ``float``, ``bool``, ``str``,
    ``pd.Timestamp`` (or ``datetime``), one of :data:`SCALARS`' names, or a dict of these by
    field name; ``"json"`` (or ``None``) declares no type. Anything else: ``ValueError``
    naming what is accepted.

    >>> declared(float).describe(), declared("json")
    ('float64', None)
    """
    if spec is None or spec == "json":
        return None
    if isinstance(spec, dict):
        return _record((field, _declared_scalar(value, field)) for field, value in spec.items())
    return _scalar(_declared_scalar(spec))


def infer(value: Any) -> StateType | None:
    """The type of ``value``, or ``None`` when it has none (a list, a nested dict, an object,
    ``None``, an int beyond 64 bits, a dict whose keys are not column names).

    >>> infer(2.5).describe(), infer({"n": 1, "last": "x"}).describe(), infer({"a": [1]})
    ('float64', {'n': 'int64', 'last': 'string'}, None)
    """
    if isinstance(value, dict):
        if not value or not all(isinstance(name, str) and _FIELD.match(name) for name in value):
            return None
        scalars = [_scalar_of(field) for field in value.values()]
        known = [scalar for scalar in scalars if scalar is not None]
        return _record(zip(value, known)) if len(known) == len(scalars) else None
    scalar = _scalar_of(value)
    return None if scalar is None else _scalar(scalar)


def _scalar(name: str) -> StateType:
    if name not in SCALARS:
        raise ValueError(f"unknown state type {name!r}: choose one of {sorted(SCALARS)}")
    return StateType((("", name),))


def _record(fields: Iterable[tuple[str, str]]) -> StateType:
    fields = tuple(fields)
    if not fields:
        raise ValueError("a record state type needs at least one field")
    for name, scalar in fields:
        if not isinstance(name, str) or not _FIELD.match(name):
            raise ValueError(f"record field {name!r}: a field name is letters, digits and '_', "
                             "not starting with a digit")
        _scalar(scalar)
    lowered = [name.lower() for name, _ in fields]
    if len(set(lowered)) < len(lowered):  # Delta's column names ignore case
        raise ValueError(f"record fields {[name for name, _ in fields]} repeat a name (case "
                         "is ignored)")
    return StateType(fields)


def _declared_scalar(spec: Any, field: str | None = None) -> str:
    if isinstance(spec, str) and spec in SCALARS:
        return spec
    if isinstance(spec, type) and spec in _DECLARED:
        return _DECLARED[spec]
    where = f" (field {field!r})" if field is not None else ""
    raise ValueError(f"state_type{where}: {spec!r} is not a state type; use int, float, bool, str, "
                     f"pd.Timestamp, one of {sorted(SCALARS)}, a dict of these by field, or "
                     "'json' for values of no fixed type")


def _scalar_of(value: Any) -> str | None:
    # bool before int: True is an int to Python, never to a column
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int64" if _INT64[0] <= int(value) <= _INT64[1] else None
    if isinstance(value, (float, np.floating)):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (dt.datetime, np.datetime64)) and not pd.isna(value):
        return "timestamp"
    return None


def _null(value: Any) -> bool:
    return value is None or value is pd.NaT


def _fits_scalar(scalar: str, value: Any) -> bool:
    found = _scalar_of(value)
    if scalar == "float64" and found == "int64":
        return abs(int(value)) <= _EXACT_FLOAT_INT
    return found == scalar
