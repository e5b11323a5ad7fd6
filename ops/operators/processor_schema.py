"""The schemas a Spark ``StatefulProcessor`` is given, as DDL text (``"k string, total long"``)
or a pyspark ``StructType``, read without a JVM: field names for state values, and the output
schema a processor's frames are put in.

>>> output_fields("k string, `total count` bigint, tags array<string>")
(('k', 'string'), ('total count', 'bigint'), ('tags', 'array<string>'))
>>> field_names("n long")
('n',)
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.types import StructType

from state import EntryColumns

from ..errors import OperatorError, PipelineDefinitionError

#: the pandas dtype an output column of a Spark type is given (nullable, as Spark's columns are)
_OUTPUT_DTYPES = {"string": "string", "long": "Int64", "bigint": "Int64", "int": "Int32",
                  "integer": "Int32", "short": "Int16", "smallint": "Int16", "double": "Float64",
                  "float": "Float32", "boolean": "boolean", "timestamp": "datetime64[us, UTC]"}


def _typed(column: pd.Series, kind: str) -> pd.Series:
    """``column`` as the output type ``kind``: a timestamp without a zone is UTC (the session
    time zone here), as Spark reads a naive pandas timestamp in its session's zone."""
    if kind == "timestamp":
        return pd.to_datetime(column, utc=True).astype(_OUTPUT_DTYPES[kind])
    return column.astype(_OUTPUT_DTYPES.get(kind, object))


def output_fields(schema: StructType | str) -> tuple[tuple[str, str], ...]:
    """``(name, type)`` of each top-level field of ``schema`` (types as lower-case DDL)."""
    if isinstance(schema, StructType):
        return tuple((field.name, field.dataType.simpleString()) for field in schema.fields)
    if not isinstance(schema, str) or not schema.strip():
        raise PipelineDefinitionError(f"a schema is a DDL string or a StructType, got {schema!r}")
    return tuple(_field(part, schema) for part in _top_level(schema))


#: the Arrow type of a state value's field of a Spark type a plain column holds (and JSON
#: carries, for an executor's rows through Spark)
_COLUMN_TYPES = {"string": pa.string(), "long": pa.int64(), "bigint": pa.int64(),
                 "int": pa.int32(), "integer": pa.int32(), "short": pa.int16(),
                 "smallint": pa.int16(), "byte": pa.int8(), "tinyint": pa.int8(),
                 "double": pa.float64(), "float": pa.float32(), "real": pa.float32(),
                 "boolean": pa.bool_(), "date": pa.date32(),
                 "timestamp": pa.timestamp("us", tz="UTC")}


def variable_columns(operator: str, variable: str, schema: StructType | str,
                     ttl: bool) -> EntryColumns:
    """Where a StatefulProcessor variable's entries are stored: the entry column
    (:func:`entry_column`), and a typed column per field of its value schema
    (``v__<operator>__<variable>__<field>``, and ``…___expires`` with a TTL), or, when a field is
    of a type no plain column holds (arrays, maps, structs, decimals, binary), the pickled value.

    >>> variable_columns("tops", "best", "x double, at timestamp", ttl=False).value_columns
    ['v__tops__best__x', 'v__tops__best__at']
    >>> variable_columns("tops", "tags", "t array<string>", ttl=True).value_columns
    ['value']
    """
    entry = entry_column(operator, variable)
    stem = entry.removeprefix("k__")
    fields = output_fields(schema)
    columns = [f"v__{stem}__{re.sub(r'[^A-Za-z0-9_]', '_', name)}" for name, _ in fields]
    expiry = f"v__{stem}___expires"
    if (any(kind not in _COLUMN_TYPES for _, kind in fields) or len(set(columns)) < len(columns)
            or expiry in columns):
        return EntryColumns(entry)
    typed = tuple((name, column, _COLUMN_TYPES[kind]) for (name, kind), column in zip(fields, columns))
    return EntryColumns(entry, typed, expiry if ttl else None)


def field_names(schema: StructType | str) -> tuple[str, ...]:
    """The names of ``schema``'s top-level fields."""
    return tuple(name for name, _ in output_fields(schema))


def conformed(frames: Iterable[pd.DataFrame], fields: tuple[tuple[str, str], ...],
              where: str) -> pd.DataFrame:
    """The frames a processor yielded, as one frame of ``fields``' columns in their order and
    types; a frame lacking one of them stops the batch (``where``: the operator and key)."""
    parts = [frame for frame in frames if len(frame.columns)]
    names = [name for name, _ in fields]
    if not parts:
        return pd.DataFrame({name: pd.Series([], dtype=_OUTPUT_DTYPES.get(kind, object))
                             for name, kind in fields})
    for frame in parts:
        check_columns(frame, fields, where)
    # a processor yields a small frame per key: selecting each one's columns (or concatenating
    # 100k frames) costs pandas ~0.2-0.4 ms a frame; its values as one object array, the
    # schema's columns taken by position (found once per column layout), ~0.02 ms
    positions: dict[tuple, list[int]] = {}
    blocks = []
    for frame in parts:
        layout = tuple(frame.columns)
        if layout not in positions:
            positions[layout] = [layout.index(name) for name in names]
        blocks.append(frame.to_numpy(dtype=object)[:, positions[layout]])
    values = np.concatenate(blocks)
    joined = {}
    for at, (name, kind) in enumerate(fields):
        try:
            joined[name] = _typed(pd.Series(values[:, at]), kind)
        except (TypeError, ValueError) as error:
            raise OperatorError(f"{where}: output column {name!r} is not of its schema's type "
                                f"{kind}: {error}") from error
    return pd.DataFrame(joined)


def check_columns(frame: pd.DataFrame, fields: tuple[tuple[str, str], ...], where: str) -> None:
    """Stop the batch if ``frame`` (a processor's output) lacks a column of ``fields``."""
    missing = [name for name, _ in fields if name not in frame.columns]
    if missing and len(frame.columns):
        raise OperatorError(f"{where}: an output frame lacks column(s) {missing} of the "
                            f"output schema; it has {list(frame.columns)}")


def _top_level(ddl: str) -> list[str]:
    """``ddl`` split at the commas outside brackets and backticks."""
    parts, depth, quoted, start = [], 0, False, 0
    for at, char in enumerate(ddl):
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "<(":
            depth += 1
        elif not quoted and char in ">)":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append(ddl[start:at])
            start = at + 1
    parts.append(ddl[start:])
    return [part.strip() for part in parts]


def _field(part: str, ddl: str) -> tuple[str, str]:
    """``name type`` (``name`` possibly in backticks, ``name: type`` too) as ``(name, type)``."""
    if part.startswith("`"):
        end = part.find("`", 1)
        name, kind = part[1:end], part[end + 1:]
    else:
        name, _, kind = part.replace(":", " ", 1).partition(" ")
    kind = kind.strip().removeprefix(":").strip().lower().removesuffix(" not null").strip()
    if not name or not kind:
        raise PipelineDefinitionError(f"schema {ddl!r}: {part!r} is not 'name type'")
    return name, kind


def entry_column(operator: str, variable: str) -> str:
    """The column a variable's entries are told apart by: ``k__<operator>__<variable>``,
    the names' characters other than letters, digits and ``_`` replaced, and then the CRC-32 of
    both names added, so that no two variables share one.

    >>> entry_column("sessions", "last10"), entry_column("s", "a b")
    ('k__sessions__last10', 'k__s__a_b_6a741ce3')
    """
    stem = f"{operator}__{variable}"
    plain = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    if plain != stem:
        plain += f"_{zlib.crc32(stem.encode()):08x}"
    return f"k__{plain}"

