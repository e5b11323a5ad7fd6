"""How an operator's state is stored in ``_state``: keys and values as text (:class:`JsonEncoding`,
the ``key`` and ``value`` columns) or in typed columns of their own (:class:`TypedEncoding`,
``k__<state>`` and ``v__<state>``; see ARCHITECTURE.md, "Typed state").

An encoding is what the two ways of holding a state in memory
(:class:`~state.run.objects.ObjectValues`, :class:`~state.run.columns.ColumnValues`) share: it reads the
stored values of some keys, turns them into Python objects or NumPy numbers, and turns a run's
changes into the rows a checkpoint appends. Holding and storing are thus independent: a
vectorized state held in arrays may be stored as text or as typed columns, and a state moved
to objects in the middle of a run (a per-key call) keeps its encoding.

>>> from state.contract.types import declared
>>> typed = TypedEncoding("sum", declared(int), key_type=None, key_groups=256, loader=None)
>>> rows = typed.changes(pd.Index([7, 8]), np.array([3]), np.array([0, 1], np.int8))
>>> typed.checkpoint_rows([rows]).select(["k__sum", "v__sum", "deleted"]).to_pylist()
[{'k__sum': 7, 'v__sum': 3, 'deleted': False}, {'k__sum': 8, 'v__sum': None, 'deleted': True}]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..contract.codecs import (
    JSON_FLOAT_PATTERN,
    JSON_INT_PATTERN,
    Codec,
    decode_key,
    decode_values,
    encode_keys,
    encode_value,
)
from ..contract.keygroups import typed_key_groups
from ..contract.types import KEY_PREFIX, VALUE_PREFIX, StateType
from ..errors import CorruptStateError, EncodingError
from ..read.found import Found
from .held import DROPPED, Loader, ValuesNeedObjects, change_frame, checkpoint_rows

#: ``(keys of the state's key type, key column, value columns)`` -> those columns of the keys
#: that hold a value, in the keys' order; every key's, for ``None`` (a typed state's
#: :data:`~state.run.held.Loader`)
TypedLoader = Callable[[pa.Array | None, str, list[str]], Found]

Keys: TypeAlias = Sequence[Hashable] | pd.Index


class Encoding(Protocol):
    """How one state name's keys and values are read from ``_state`` and written to it."""

    name: str

    @property
    def loads(self) -> bool:
        """Whether anything can be stored (the run started from a checkpoint)."""
        ...

    def load(self, keys: Keys) -> tuple[np.ndarray, pa.Array]:
        """For ``keys`` (unique): whether each holds a stored value, and the stored values of
        those that do, in their order, as this encoding keeps them (for :meth:`objects`,
        :meth:`numbers`)."""
        ...

    def load_all(self) -> tuple[list[Hashable], pa.Array]:
        """Every stored key holding a value, and the values, at the same positions."""
        ...

    def objects(self, stored: pa.Array, keys: Sequence[Hashable]) -> list[Any]:
        """``stored`` values (of ``keys``) as Python objects."""
        ...

    def numbers(self, stored: pa.Array, keys: pd.Index, dtype: np.dtype) -> np.ndarray:
        """``stored`` values (of ``keys``) as an array of ``dtype``; :class:`ValuesNeedObjects`
        when one is not such a number."""
        ...

    def column_dtype(self, initial: Any) -> np.dtype | None:
        """The dtype a state of this initial value is held in as a column, or ``None`` when
        it is held as objects."""
        ...

    def changes(self, keys: Keys, values: Sequence[Any] | np.ndarray,
                deleted: np.ndarray) -> pd.DataFrame | pa.Table:
        """The rows of changed ``keys``: the first ``len(values)`` set to ``values``, the rest
        deleted; ``deleted`` per key (int8: 0, 1 or :data:`~state.run.held.DROPPED`). A value that
        cannot be stored raises :class:`~state.errors.EncodingError` naming its key."""
        ...

    def checkpoint_rows(self, frames: list[Any]) -> pd.DataFrame | pa.Table:
        """The rows a checkpoint writes from :meth:`changes`' frames: each key's last change."""
        ...


class JsonEncoding:
    """Keys as their JSON text in ``key``, values as their codec's text in ``value``: any
    value the codec stores. What every release before typed state wrote."""

    key_column = "key"

    def __init__(self, name: str, codec: Codec, loader: Loader | None):
        self.name = name
        self.codec = codec
        self._loader = loader

    @property
    def loads(self) -> bool:
        return self._loader is not None

    def load(self, keys: Keys) -> tuple[np.ndarray, pa.Array]:
        assert self._loader is not None, "nothing is stored without a checkpoint"
        found = self._loader(self.name, _encoded_keys(keys))
        return found.holding, found.rows["value"].combine_chunks()

    def load_all(self) -> tuple[list[Hashable], pa.Array]:
        assert self._loader is not None, "nothing is stored without a checkpoint"
        stored = self._loader(self.name, None).rows
        return [decode_key(text) for text in stored["key"].to_pylist()], stored["value"]

    def objects(self, stored: pa.Array, keys: Sequence[Hashable]) -> list[Any]:
        return decode_values(self.codec, stored, list(keys), operator=self.name)

    def numbers(self, stored: pa.Array, keys: pd.Index, dtype: np.dtype) -> np.ndarray:
        if not len(stored):
            return np.zeros(0, dtype)
        pattern = JSON_INT_PATTERN if dtype.kind == "i" else JSON_FLOAT_PATTERN
        if stored.null_count == 0 and pc.all(pc.match_substring_regex(stored, pattern)).as_py():
            return pc.cast(stored, pa.from_numpy_dtype(dtype)).to_numpy(zero_copy_only=False)
        # NaN, Infinity, or values of another type: decoded one by one (errors name the key)
        values = self.objects(stored, keys.tolist())
        kind = int if dtype.kind == "i" else float
        if set(map(type, values)) - {kind}:
            raise ValuesNeedObjects(f"{self.name}: a stored value is not a {kind.__name__}")
        try:
            return np.array(values, dtype)
        except OverflowError:
            raise ValuesNeedObjects(f"{self.name}: a stored int exceeds 64 bits") from None

    def column_dtype(self, initial: Any) -> np.dtype | None:
        """JSON numbers: an int of 64 bits or a float (not a bool)."""
        if self.codec.name != "json":
            return None
        if type(initial) is float:
            return np.dtype(np.float64)
        if type(initial) is int and -2**63 <= initial < 2**63:
            return np.dtype(np.int64)
        return None

    def changes(self, keys: Keys, values: Sequence[Any] | np.ndarray,
                deleted: np.ndarray) -> pd.DataFrame:
        texts = self._texts(keys, values)
        return change_frame(self.name, _encoded_keys(keys),
                            np.concatenate([np.array(texts, dtype=object),
                                            np.full(len(keys) - len(values), None, object)]),
                            deleted)

    def _texts(self, keys: Keys, values: Sequence[Any] | np.ndarray) -> list[str] | np.ndarray:
        if isinstance(values, np.ndarray) and values.dtype.kind == "i":
            # Arrow writes an int's digits as str() does, in one cast
            return pc.cast(pa.array(values), pa.string()).to_numpy(zero_copy_only=False)
        values = values.tolist() if isinstance(values, np.ndarray) else list(values)
        try:
            return self.codec.encode_many(values)
        except Exception:
            for key, value in zip(keys, values):  # find the value, and raise naming its key
                encode_value(self.codec, value, operator=self.name, key=key)
            raise

    def checkpoint_rows(self, frames: list[Any]) -> pd.DataFrame:
        return checkpoint_rows(frames)


class TypedEncoding:
    """Keys in a column of their type (``k__<state>``: ``int64`` or ``string``), values in
    columns of the state's declared :class:`~state.contract.types.StateType` (``v__<state>``, or
    ``v__<state>__<field>`` per field of a record); ``key`` and ``value`` stay null. Spark,
    DuckDB or any Parquet reader see the numbers as numbers.

    The key column's type is the table's when it has the column, else the first keys' (the
    type of a state's keys never changes). A key of another type, or a value that does not fit
    the state type, raises :class:`~state.errors.EncodingError` before anything is written.
    Key groups are those of the keys' JSON text (:func:`~state.contract.keygroups.typed_key_groups`),
    so a key keeps its group whichever way its state is stored.
    """

    def __init__(self, name: str, state_type: StateType, *, key_type: pa.DataType | None,
                 key_groups: int, loader: TypedLoader | None, inferred_from: str | None = None):
        self.name = name
        self.state_type = state_type
        #: the ``state=`` value (its repr) the type was inferred from; ``None``: declared
        self.inferred_from = inferred_from
        self.key_type = key_type
        self._groups = key_groups
        self._loader = loader
        self.key_column = KEY_PREFIX + name
        self.value_fields = state_type.arrow_fields(VALUE_PREFIX + name)

    @property
    def value_columns(self) -> list[str]:
        return [field.name for field in self.value_fields]

    @property
    def loads(self) -> bool:
        return self._loader is not None

    def load(self, keys: Keys) -> tuple[np.ndarray, pa.Array]:
        assert self._loader is not None, "nothing is stored without a checkpoint"
        typed = self._key_array(keys)
        found = self._loader(typed, self.key_column, self.value_columns)
        return found.holding, self._values_of(found.rows)

    def load_all(self) -> tuple[list[Hashable], pa.Array]:
        assert self._loader is not None, "nothing is stored without a checkpoint"
        stored = self._loader(None, self.key_column, self.value_columns).rows
        return stored[self.key_column].to_pylist(), self._values_of(stored)

    def _values_of(self, stored: pa.Table) -> pa.Array:
        """The stored value columns as one array: the scalar's, or a struct of the fields."""
        columns = [stored[name].combine_chunks() for name in self.value_columns]
        if not self.state_type.is_record:
            return columns[0]
        names = [name for name, _ in self.state_type.fields]
        return pa.StructArray.from_arrays(columns, names=names)

    def objects(self, stored: pa.Array, keys: Sequence[Hashable]) -> list[Any]:
        if pa.types.is_timestamp(stored.type):
            return [None if value is None else pd.Timestamp(value) for value in stored.to_pylist()]
        return stored.to_pylist()  # a record: a dict of every field (null: None)

    def numbers(self, stored: pa.Array, keys: pd.Index, dtype: np.dtype) -> np.ndarray:
        if not len(stored):  # none held (their column may not even be in the table yet)
            return np.zeros(0, dtype)
        if stored.null_count or stored.type != pa.from_numpy_dtype(dtype):
            raise ValuesNeedObjects(f"{self.name}: stored values are not all {dtype}")
        return stored.to_numpy(zero_copy_only=False)

    def column_dtype(self, initial: Any) -> np.dtype | None:
        """The declared type's dtype, for an int64 or float64 state whose initial value fits."""
        scalar = None if self.state_type.is_record else self.state_type.fields[0][1]
        if scalar not in ("int64", "float64") or self.state_type.first_misfit([initial]) is not None:
            return None
        return np.dtype(scalar)

    def changes(self, keys: Keys, values: Sequence[Any] | np.ndarray,
                deleted: np.ndarray) -> pa.Table:
        typed = self._key_array(keys)
        columns = self._value_arrays(keys, values, len(typed))
        return pa.table({
            "operator": pa.array([self.name] * len(typed), pa.string()),
            self.key_column: typed,
            **dict(zip(self.value_columns, columns)),
            "deleted": pa.array(deleted, pa.int8()),
            "key_group": pa.array(typed_key_groups(typed, self._groups), pa.int32()),
        })

    def _value_arrays(self, keys: Keys, values: Sequence[Any] | np.ndarray,
                      count: int) -> list[pa.Array]:
        """The value columns of ``values`` (then nulls up to ``count``: the deleted keys)."""
        if isinstance(values, np.ndarray) and not self.state_type.is_record:
            scalar = self.value_fields[0].type
            if pa.from_numpy_dtype(values.dtype) == scalar:  # a column state: no Python objects
                return [pa.concat_arrays([pa.array(values, scalar),
                                          pa.nulls(count - len(values), scalar)])]
        values = values.tolist() if isinstance(values, np.ndarray) else list(values)
        misfit = self.state_type.first_misfit(values)
        if misfit is not None:
            raise EncodingError(self._misfit(keys[misfit], values[misfit]))
        values = values + [None] * (count - len(values))
        if not self.state_type.is_record:
            return [_arrow_values(values, self.value_fields[0].type)]
        return [_arrow_values([None if value is None else value.get(name) for value in values],
                              field.type)
                for (name, _), field in zip(self.state_type.fields, self.value_fields)]

    def _misfit(self, key: Hashable, value: Any) -> str:
        described = self.state_type.describe()
        if self.inferred_from is not None:
            return (f"state of operator {self.name!r} for key {key!r}: {value!r} does not fit "
                    f"its state_type {described!r}, inferred from {self.inferred_from} (a "
                    "map without state_type= stores its state typed as its state= value is, "
                    "and the type binds once stored); nothing of this batch was written. Declare "
                    "state_type='json' (then sp.migrate(spark, pipeline) converts the stored "
                    "state back to text), or declare the wider type from the start (such as "
                    "state_type=float)")
        return (f"state of operator {self.name!r} for key {key!r}: {value!r} does not fit its "
                f"declared state_type {described!r}; nothing of this batch was "
                "written. Set values of that type, or declare state_type='json' (for a pipeline "
                "that has checkpointed, that is a change of storage: see "
                "docs/pages/guides/changing-pipelines.md)")

    def _key_array(self, keys: Keys) -> pa.Array:
        """``keys`` as an array of the key column's type; the first keys fix that type."""
        if not len(keys):
            return pa.array([], self.key_type or pa.int64())
        try:
            typed = pa.array(keys.to_numpy() if isinstance(keys, pd.Index) else list(keys))
        except (pa.ArrowException, TypeError, ValueError):
            typed = pa.array([], pa.null())
        if pa.types.is_integer(typed.type) and not pa.types.is_uint64(typed.type):
            typed = typed.cast(pa.int64())
        kind = self.key_type or typed.type
        if typed.type != kind or kind not in (pa.int64(), pa.string()) or typed.null_count:
            example = next(iter(keys), None)
            stored = f" (its stored keys are {self.key_type})" if self.key_type else ""
            raise EncodingError(
                f"state of operator {self.name!r}: typed state keeps its keys in one column of "
                f"ints or of strings{stored}, and key {example!r} is not such a key; nothing of "
                "this batch was written. Key the stream by one int or string column, or declare "
                "state_type='json'" + self._inferred_note())
        self.key_type = kind
        return typed

    def _inferred_note(self) -> str:
        if self.inferred_from is None:
            return ""
        return (f" (its type was inferred from {self.inferred_from}; then sp.migrate(spark, "
                "pipeline) converts the stored state back to text)")

    def checkpoint_rows(self, frames: list[Any]) -> pa.Table:
        if not frames:
            return pa.table({})
        rows = pa.concat_tables(frames) if len(frames) > 1 else frames[0]
        keys = pd.Index(_plain(rows[self.key_column]))
        last = ~keys.duplicated(keep="last")  # the same key changed by several batches
        deleted = rows["deleted"].to_numpy()
        rows = rows.filter(pa.array(last & (deleted != DROPPED)))
        return rows.set_column(rows.schema.get_field_index("deleted"), "deleted",
                               pc.not_equal(rows["deleted"], 0))


def _encoded_keys(keys: Keys) -> pa.Array:
    """:func:`~state.contract.codecs.encode_keys` of ``keys``; an Index of ints (the usual key) in one
    Arrow cast."""
    if isinstance(keys, pd.Index) and keys.dtype.kind in "iu":
        return pc.cast(pa.array(keys.to_numpy()), pa.string())
    return pa.array(encode_keys(list(keys)), pa.string())


def _plain(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A key column as NumPy, for pandas' hash index (strings as objects)."""
    return column.to_numpy(zero_copy_only=False)


def _arrow_values(values: list[Any], kind: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(kind):  # naive times are UTC, as everywhere in lakestream
        values = [None if value is None else _utc(value) for value in values]
    try:
        return pa.array(values, kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
        raise CorruptStateError(f"values fit {kind} but Arrow refused them: {error}") from error


def _utc(value: Any) -> pd.Timestamp:
    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")

