"""The columns of a state of many rows per key (a value's one entry, a list's elements, a map's
entries: see :mod:`state.run.entries`): where its rows keep the entry and the value
(:class:`EntryColumns`), and how a typed value travels as text where a row has only ``value``
(an executor's rows handed in or back through Spark): the JSON of its fields, which Python
(:func:`value_json`, :func:`from_value_json`) and Spark (:func:`value_json_column`,
:func:`value_columns_from_json`) write and read alike."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import LongType, StructField, StructType


@dataclass(frozen=True)
class EntryColumns:
    """Where an entry state's rows keep the entry and the value: ``entry`` (``k__<stem>``),
    and ``fields`` (``(field, column, Arrow type)`` of each field of a typed value; none: the
    value is its codec's text in ``value``), ``expiry`` (a typed value's TTL stamp column).

    >>> typed = EntryColumns("k__o__v", (("n", "v__o__v__n", pa.int64()),), "v__o__v___expires")
    >>> typed.value_columns, EntryColumns("k__o__w").value_columns
    (['v__o__v__n', 'v__o__v___expires'], ['value'])
    """

    entry: str
    fields: tuple[tuple[str, str, pa.DataType], ...] = ()
    expiry: str | None = None

    @property
    def value_columns(self) -> list[str]:
        if not self.fields:
            return ["value"]
        return [column for _, column, _ in self.fields] + ([self.expiry] if self.expiry else [])

    def arrow_types(self) -> dict[str, pa.DataType]:
        """Each value column's type."""
        if not self.fields:
            return {"value": pa.string()}
        typed = {column: kind for _, column, kind in self.fields}
        return typed | ({self.expiry: pa.int64()} if self.expiry else {})


# How a typed entry's value travels as text where a row has only ``value`` (an executor's rows
# handed in or back through Spark): the JSON object of its fields, with its TTL stamp under
# EXPIRES; Spark writes and reads the same text (to_json, from_json).
EXPIRES = "__expires"


def value_json(rows: pa.Table, columns: EntryColumns) -> list[str | None]:
    """Each row's value as text: a typed value's fields as JSON (null for a removed entry), or
    the ``value`` text as it is.

    >>> typed = EntryColumns("k__o__v", (("n", "v__o__v__n", pa.int64()),))
    >>> value_json(pa.table({"v__o__v__n": [3, None], "deleted": [False, True]}), typed)
    ['{"n": 3}', None]
    """
    if not columns.fields:
        return rows["value"].to_pylist()
    fields = [(field, rows[column].to_pylist()) for field, column, _ in columns.fields]
    if columns.expiry is not None:
        fields.append((EXPIRES, rows[columns.expiry].to_pylist()))
    deleted = rows["deleted"].to_pylist()
    return [None if gone else json.dumps({field: _plain(values[at]) for field, values in fields})
            for at, gone in enumerate(deleted)]


def from_value_json(texts: list[str | None], columns: EntryColumns) -> dict[str, pa.Array]:
    """The value columns of rows whose values came as :func:`value_json` text (Spark's
    ``to_json`` gives the same)."""
    if not columns.fields:
        return {"value": pa.array(texts, pa.string())}
    parsed = [None if text is None else json.loads(text) for text in texts]
    arrays = {column: pa.array([_typed(None if value is None else value.get(field), kind)
                                for value in parsed], kind)
              for field, column, kind in columns.fields}
    if columns.expiry is not None:
        arrays[columns.expiry] = pa.array([None if value is None else value.get(EXPIRES)
                                           for value in parsed], pa.int64())
    return arrays


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else value


def _typed(value: Any, kind: pa.DataType) -> Any:
    if value is None or not isinstance(value, str):
        return value
    if pa.types.is_timestamp(kind):
        return dt.datetime.fromisoformat(value)
    if pa.types.is_date(kind):
        return dt.date.fromisoformat(value[:10])
    return value


def value_json_column(columns: EntryColumns) -> Column:
    """Spark's :func:`value_json` of a ``_state`` row of the entry state."""
    if not columns.fields:
        return F.col("value")
    fields = [F.col(column).alias(field) for field, column, _ in columns.fields]
    if columns.expiry is not None:
        fields.append(F.col(columns.expiry).alias(EXPIRES))
    return F.to_json(F.struct(*fields))


def value_columns_from_json(columns: EntryColumns) -> dict[str, Column]:
    """Spark's :func:`from_value_json` of a row's ``value`` text: each value column."""
    if not columns.fields:
        return {"value": F.col("value")}
    schema = StructType([StructField(field, from_arrow_type(kind)) for field, _, kind in columns.fields]
                        + ([StructField(EXPIRES, LongType())] if columns.expiry else []))
    parsed = F.from_json(F.col("value"), schema)
    found = {column: parsed[field] for field, column, _ in columns.fields}
    return found | ({columns.expiry: parsed[EXPIRES]} if columns.expiry else {})
