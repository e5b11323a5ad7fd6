"""Aggregate functions for keyed aggregations: each keeps a small accumulator per key in managed
state, folds a batch into it with vectorized pandas partials, and reads a result out of it.

Nulls are ignored by every aggregate (SQL and ksqlDB semantics) but ``collect_list`` and
``collect_set``, which keep them as ksqlDB does; ``count()`` with no column counts rows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

from ..errors import PipelineDefinitionError


@dataclass(frozen=True)
class Agg:
    """One aggregate: ``kind`` over ``column`` (``None``: whole rows, for ``count()``)."""

    kind: str
    column: str | None = None
    fn: Callable[[Any, pd.Series], Any] | None = None
    initial: Any = None
    #: the pandas dtype of its results, when the input column's type is declared (see typed)
    dtype: str | None = None
    #: ``avg``'s result over no values (none yet, only nulls, or all taken back)
    empty: float | None = None

    @property
    def spec(self) -> str:
        """What it computes, as recorded with a checkpoint: ``sum(x)``, ``count(*)``.

        >>> sum_("x").spec, count().spec
        ('sum(x)', 'count(*)')
        """
        return f"{self.kind}({self.column or '*'})"

    def typed(self, field_types: Mapping[str, str]) -> Agg:
        """This aggregate with the dtype of its results fixed by its input column's declared
        type (``field_types``: column -> ``long``/``double``/…), so a batch whose values are
        all null still emits a typed column: a sink table's column type never depends on the
        first batch's values. Unchanged when the column's type is not declared.

        >>> sum_("x").typed({"x": "long"}).dtype, max_("s").typed({"s": "string"}).dtype
        ('Int64', 'string')
        """
        declared = field_types.get(self.column) if self.column else None
        if declared is None or self.kind not in _TYPED_KINDS:
            return self
        if self.kind == "sum" and declared not in ("long", "double"):
            return self
        return replace(self, dtype=NULLABLE_DTYPES[declared])

    def partial(self, groups: DataFrameGroupBy) -> pd.Series:
        """This batch's contribution per group (index: group key)."""
        if self.kind == "count":
            return groups.size() if self.column is None else groups[self.column].count()
        values = groups[self.column]
        if self.kind == "sum":
            return values.sum(min_count=1)
        if self.kind in ("min", "max"):
            return _instants_as_numbers(getattr(values, self.kind)())
        if self.kind == "avg":
            return pd.Series(list(zip(values.sum(min_count=1), values.count())),
                             index=values.count().index)
        if self.kind == "latest":  # pandas' last() skips nulls: the latest non-null by offset
            return _instants_as_numbers(values.last())
        if self.kind == "latest_nulls":
            return _instants_as_numbers(values.last(skipna=False))
        if self.kind == "collect_list":
            return values.agg(_plain_list)
        if self.kind == "collect_set":
            return values.agg(lambda s: _distinct(_plain_list(s)))
        if self.kind == "count_distinct":
            return values.agg(lambda s: _distinct(_instant_as_number(v) for v in s.dropna()))
        # user aggregate: the group's values (in order), folded into the accumulator in combine
        return values.agg(lambda s: [to_python(v) for v in s])

    def record_partial(self, value: Any, missing: bool, sign: int = 1) -> Any:
        """What one record contributes, in the shape of a batch partial (``missing``: its
        value is null; ``sign`` -1: a table's row taken back, see :meth:`signed_partial`)."""
        value = None if missing else _instant_as_number(to_python(value))
        if self.kind == "count":
            return 0 if missing else sign
        if self.kind == "avg":
            return (None, 0) if missing else (value * sign, sign)
        if self.kind == "collect_list":
            return [value] if sign > 0 else ListChanges([(value, sign)])
        if self.kind == "collect_set":
            return [value]
        if self.kind == "count_distinct":
            return [] if missing else [value]
        if self.kind == "udf":
            return [value]
        if self.kind == "sum" and not missing:
            return value * sign
        return None if missing else value

    def signed_partial(self, frame: pd.DataFrame, by: list[str], sign: str) -> pd.Series:
        """:meth:`partial` of rows added (``frame[sign]`` +1) and taken back (-1), for the
        aggregates that can undo a row (:data:`UNDOABLE`): COUNT adds the signs of its rows,
        SUM the signed values, AVG both, COLLECT_LIST each row's value added or taken back, in
        order (:class:`ListChanges`)."""
        signs = frame[sign]
        if self.kind == "collect_list":
            pairs = list(zip(_plain_list(frame[self.column]), signs.tolist()))
            return (frame.assign(__p=pairs).groupby(by, sort=False)["__p"]
                    .agg(lambda rows: ListChanges(rows.tolist())))
        if self.column is None:
            counted = signs
        else:
            counted = signs.where(frame[self.column].notna(), 0)
        if self.kind == "count":
            return frame.assign(__w=counted).groupby(by, sort=False)["__w"].sum()
        signed = frame.assign(__v=frame[self.column] * signs, __w=counted).groupby(by, sort=False)
        total = signed["__v"].sum(min_count=1)
        if self.kind == "sum":
            return total
        return pd.Series(list(zip(total, signed["__w"].sum())), index=total.index)  # avg

    def combine(self, acc: Any, part: Any) -> Any:
        """Fold one key's batch partial into its accumulator (``None`` before the first row)."""
        part = _instant_as_number(to_python(part))
        kind = self.kind
        if kind in ("collect_list", "collect_set", "count_distinct"):
            return _collected(kind, list(acc or []), [] if is_missing(part) else part)
        if kind == "count":
            return (acc or 0) + int(part)
        if kind == "avg":
            total, count = acc or (None, 0)
            batch_total, batch_count = part
            batch_total = to_python(batch_total)
            if is_missing(batch_total):  # nulls only (a net count of 0 may still move the total)
                return [total, count]
            return [batch_total if total is None else total + batch_total, count + int(batch_count)]
        if kind == "udf":
            if self.fn is None:
                raise PipelineDefinitionError("a user aggregate needs its function: sp.aggregate(...)")
            return self.fn(copy.deepcopy(self.initial) if acc is None else acc, pd.Series(part))
        if kind == "latest_nulls":
            return None if is_missing(part) else part
        if is_missing(part):
            return acc
        if acc is None:
            return part
        if kind == "sum":
            return acc + part
        if kind == "min":
            return min(acc, part)
        if kind == "max":
            return max(acc, part)
        return part  # latest

    def result(self, acc: Any) -> Any:
        """The aggregate's value for an accumulator."""
        if self.kind == "count":
            return acc or 0
        if self.kind == "count_distinct":
            return len(acc or [])
        if self.kind == "avg":
            total, count = acc or (None, 0)
            return self.empty if not count or total is None else total / count
        if isinstance(acc, int) and self.dtype is not None and self.dtype.startswith("datetime64"):
            return pd.Timestamp(acc, tz="UTC")  # an instant kept as its nanoseconds
        return acc


#: The aggregates that can take a row back, so they may aggregate a table (ksqlDB's rule).
UNDOABLE = frozenset({"count", "sum", "avg", "collect_list"})
_TYPED_KINDS = frozenset({"sum", "min", "max", "latest", "latest_nulls"})  # results of the input's type
#: The nullable pandas dtype of each declared kind: a column keeps its type with nulls in it.
NULLABLE_DTYPES = {"long": "Int64", "double": "Float64", "string": "string", "boolean": "boolean",
                  "timestamp": "datetime64[ns, UTC]"}


def is_missing(value: Any) -> bool:
    """Whether ``value`` is null: ``None``, pandas' ``NA`` or a float NaN."""
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def to_python(value: Any) -> Any:
    """numpy scalars become Python ones and pandas' ``NA`` (nullable columns) ``None``, so
    accumulators stay JSON-encodable."""
    if value is pd.NA:
        return None
    return value.item() if isinstance(value, np.generic) else value


def count(column: str | None = None) -> Agg:
    """Rows (no column) or non-null values of ``column``."""
    return Agg("count", column)


def sum_(column: str) -> Agg:
    return Agg("sum", column)


def min_(column: str) -> Agg:
    return Agg("min", column)


def max_(column: str) -> Agg:
    return Agg("max", column)


def avg(column: str, empty: float | None = None) -> Agg:
    """The mean of the non-null values of ``column``; ``empty`` when there are none (SQL's
    null by default; ksqlDB's ``AVG`` gives 0.0, and ``sp.sql`` asks for that)."""
    return Agg("avg", column, empty=empty)


def latest_by_offset(column: str, ignore_nulls: bool = True) -> Agg:
    """The last non-null value of ``column`` in input order; with ``ignore_nulls=False`` the
    last value, null or not (ksqlDB's ``LATEST_BY_OFFSET(col, false)``)."""
    return Agg("latest" if ignore_nulls else "latest_nulls", column)


def collect_list(column: str) -> Agg:
    """Every value of ``column``, nulls included, in input order (ksqlDB's ``COLLECT_LIST``).
    Over a table, a row taken back removes the last occurrence of its value."""
    return Agg("collect_list", column)


def collect_set(column: str) -> Agg:
    """The distinct values of ``column`` (a null once), in the order first seen (ksqlDB's
    ``COLLECT_SET``: a stream only)."""
    return Agg("collect_set", column)


def count_distinct(column: str) -> Agg:
    """The number of distinct non-null values of ``column`` (SQL's ``COUNT(DISTINCT column)``:
    a stream only). Its state holds the distinct values seen, so it grows with them.

    >>> agg = count_distinct("bidder")
    >>> acc = agg.combine(agg.combine(None, [1, 2]), [2, 3])
    >>> agg.result(acc)
    3
    """
    return Agg("count_distinct", column)


class ListChanges(list):
    """A table's ``(value, sign)`` rows for ``collect_list``, in order: +1 appends the value,
    -1 removes its last occurrence (ksqlDB's ``undo``)."""


def _instant_as_number(value: Any) -> Any:
    """A timestamp as its nanoseconds since the epoch (UTC), which keep their order and are
    JSON in the accumulator (:meth:`Agg.result` makes a timestamp of them again when the
    column's type is declared); anything else as it is."""
    if isinstance(value, pd.Timestamp):
        return (value if value.tzinfo is not None else value.tz_localize("UTC")).value
    return value


def _instants_as_numbers(partial: pd.Series) -> pd.Series:
    """A partial of timestamps as nanoseconds (see :func:`_instant_as_number`), null kept."""
    if not pd.api.types.is_datetime64_any_dtype(partial.dtype):
        return partial
    numbers = pd.Series(pd.array(partial.array.asi8, dtype="Int64"), index=partial.index)
    return numbers.mask(partial.isna())


def _plain_list(values: pd.Series) -> list[Any]:
    """The values as plain Python ones, a null (NaN, NA) as ``None``."""
    return [None if is_missing(value) else to_python(value) for value in values]


def _distinct(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))  # hashable scalars; first seen first


def _collected(kind: str, acc: list[Any], part: list[Any]) -> list[Any]:
    """``acc`` after ``part``: appended (or, for a set, the values not in it yet); a table's
    :class:`ListChanges` applied in order."""
    if kind in ("collect_set", "count_distinct"):
        return _distinct(acc + part)
    if not isinstance(part, ListChanges):
        return acc + part
    for value, sign in part:
        if sign > 0:
            acc.append(value)
        elif value in acc:
            del acc[len(acc) - 1 - acc[::-1].index(value)]
    return acc


def aggregate(column: str, fn: Callable[[Any, pd.Series], Any], initial: Any) -> Agg:
    """A user aggregate: ``fn(accumulator, values_of_this_batch) -> accumulator``, starting from
    ``initial``; the accumulator (JSON-encodable) is the result."""
    if not callable(fn):
        raise PipelineDefinitionError(f"aggregate needs a function, got {type(fn).__name__}")
    return Agg("udf", column, fn=fn, initial=initial)
