"""Validation of incoming records against a source's declared schema.

A record that fails is never dropped silently: it goes to the pipeline's dead-letter table with
the reason, while the other records of the batch carry on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import PipelineDefinitionError


def _as_long(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("is a boolean, not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    raise ValueError(f"{value!r} is not an integer")


def _as_double(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("is a boolean, not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
        if math.isfinite(number):
            return number
    raise ValueError(f"{value!r} is not a number")


def _as_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{value!r} is not a string")


def _as_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{value!r} is not a boolean")


def _as_timestamp(value: Any) -> pd.Timestamp:
    try:
        stamp = pd.Timestamp(value, unit="s") if isinstance(value, (int, float)) else pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ValueError(f"{value!r} is not a timestamp (ISO-8601 text or epoch seconds)") from None
    if pd.isna(stamp):
        raise ValueError(f"{value!r} is not a timestamp")
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "long": _as_long, "double": _as_double, "string": _as_string,
    "boolean": _as_boolean, "timestamp": _as_timestamp,
}
SPARK_TYPES = {"long": LongType(), "double": DoubleType(), "string": StringType(),
               "boolean": BooleanType(), "timestamp": TimestampType()}
_DTYPES = {"long": "int64", "double": "float64", "string": "object", "boolean": "bool",
           "timestamp": "datetime64[ns, UTC]"}
_NULLABLE = {"long": "Int64", "boolean": "boolean"}  # where _DTYPES holds no null


@dataclass(frozen=True)
class RecordSchema:
    """Field name -> type (``long``, ``double``, ``string``, ``boolean``, ``timestamp``).

    ``key`` (if any) must be present and non-null in every record. Fields not in the schema pass
    through untouched; with no schema at all, records pass as they are and only the key is checked.
    """

    fields: Mapping[str, str]
    key: str | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name, kind in self.fields.items():
            if kind not in _CONVERTERS:
                raise PipelineDefinitionError(
                    f"field {name!r} has unknown type {kind!r}; use one of {sorted(_CONVERTERS)}")

    @property
    def key_fields(self) -> tuple[str, ...]:
        if self.key is None:
            return ()
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)

    def check(self, record: Any) -> dict[str, Any]:
        """The record converted to the schema's types; ``ValueError`` names the field at fault."""
        if not isinstance(record, dict):
            raise ValueError(f"record is a {type(record).__name__}, not an object")
        for name in self.key_fields:
            if record.get(name) is None:
                raise ValueError(f"key field {name!r} is missing or null")
        converted = dict(record)
        for name, kind in self.fields.items():
            if record.get(name) is None:
                if name in self.key_fields:
                    continue
                converted[name] = None
                continue
            try:
                converted[name] = _CONVERTERS[kind](record[name])
            except ValueError as exc:
                raise ValueError(f"field {name!r} {exc}; expected {kind}") from None
        return converted

    def spark_schema(self) -> StructType:
        """The schema's fields as Spark types (key fields it does not type: strings)."""
        fields = [StructField(n, SPARK_TYPES[t]) for n, t in self.fields.items()]
        fields += [StructField(n, StringType()) for n in self.key_fields if n not in self.fields]
        return StructType(fields)

    def frame(self, records: list[dict[str, Any]], index: list[int]) -> pd.DataFrame:
        """Checked records as a DataFrame with the schema's dtypes; a long or boolean column
        that some records lack is nullable (``Int64``, ``boolean``), the others as pandas makes
        them."""
        frame = pd.DataFrame.from_records(records, index=index) if records else pd.DataFrame(
            {name: pd.Series(dtype=_DTYPES[kind]) for name, kind in self.fields.items()})
        for name, kind in self.fields.items():
            if name not in frame or not len(frame):
                continue
            if frame[name].notna().all():
                frame[name] = frame[name].astype(_DTYPES[kind])
            elif kind in _NULLABLE and frame[name].notna().any():
                # some records lack it: a nullable integer, not the floats pandas would make
                # (a sink's long column would meet a double one)
                frame[name] = frame[name].astype(_NULLABLE[kind])
        return frame

    def with_fields(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with every declared field, those it lacks all null in their nullable
        dtypes. A merged stream's batch may hold records of some of its sources only; the
        operators after it still read every source's columns (a join's stream columns in a
        batch of table updates only), so a batch's columns never depend on what it holds.

        >>> schema = RecordSchema({"id": "long", "name": "string"})
        >>> schema.with_fields(pd.DataFrame({"id": [1]})).dtypes.astype(str).to_dict()
        {'id': 'int64', 'name': 'object'}
        """
        missing = [name for name in self.fields if name not in frame.columns]
        if not missing:
            return frame
        return frame.assign(**{name: pd.Series(None, index=frame.index, dtype=_nullable(self.fields[name]))
                               for name in missing})


def _nullable(kind: str) -> str:
    """The dtype of a column of ``kind`` that may hold nulls."""
    return _NULLABLE.get(kind, _DTYPES[kind])


def parse_payload(text: str) -> Any:
    """Decode one stored record; ``ValueError`` when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"record is not valid JSON ({exc.msg} at {exc.pos})") from None


def encode_record(record: Any) -> str:
    """Encode a published record for the inbox. Anything JSON cannot hold is kept as its repr,
    so the record is still stored (and dead-lettered by validation) rather than lost."""
    return json.dumps(record, default=lambda value: _json_fallback(value), separators=(",", ":"))


def _json_fallback(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return repr(value)
