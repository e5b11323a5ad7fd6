"""Managed operator state: per-key (or unkeyed) values cached for a run, changes kept until a checkpoint."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ..contract.changes import StateRows
from ..contract.codecs import codec_named, encode_value
from ..contract.entries import EntryColumns, from_value_json
from ..contract.keygroups import DEFAULT_KEY_GROUPS
from ..contract.types import KEY_PREFIX, StateType, StateTypes
from ..errors import StateError
from ..lake import tables
from ..layout import PipelineLayout
from ..read import lookup
from ..read.found import Found
from ..read.latest import latest_per_key, latest_values
from .columns import ColumnValues
from .encodings import Encoding, JsonEncoding, TypedEncoding, TypedLoader
from .entries import EntryState
from .held import Loader, ValuesNeedObjects
from .objects import ObjectValues
from .timers import Timers, timer_state


class OperatorState:
    """The state of one operator during a run: per-key (or unkeyed) values read from ``_state``
    the first time a key is seen in the run, kept in memory, and changes kept until a checkpoint
    writes them.

    The values are held as a Python object per key (:class:`~state.run.objects.ObjectValues`), or,
    when the store was asked for ``columns`` and the initial state is a number, in arrays
    (:class:`~state.run.columns.ColumnValues`) until a value that is not such a number comes: from
    then on, for the rest of the run, as objects (nothing is lost in the move).

    >>> store = StateStore.of_rows(pd.DataFrame(
    ...     {"operator": ["w", "w"], "key": ['"a"', '"b"'], "value": ["1", "2"]}))
    >>> state = store.operator("w", 0, columns=True)
    >>> state.set_many(pd.Series([5], index=["c"])); state.get_many(["a", "c", "d"]).tolist()
    [1, 5, 0]
    >>> state.delete("a"); sorted(state.held_keys())
    ['b', 'c']
    """

    def __init__(self, name: str, initial: Any, encoding: Encoding, columns: bool = False):
        self.name = name
        self._encoding = encoding
        self._held: ObjectValues | ColumnValues = (
            ColumnValues(name, initial, encoding) if columns and ColumnValues.holds(initial, encoding)
            else ObjectValues(name, initial, encoding))

    @property
    def in_columns(self) -> bool:
        """Whether the values are held in arrays (see :mod:`state.run.columns`)."""
        return isinstance(self._held, ColumnValues)

    def _objects(self) -> ObjectValues:
        """The values as objects, moving them there if they were held in columns."""
        if isinstance(self._held, ColumnValues):
            self._held = self._held.as_objects()
        return self._held

    def prefetch(self, keys: Iterable[Hashable]) -> None:
        """Load the stored values of ``keys`` not yet seen in this run, in one read."""
        try:
            self._held.prefetch(keys)
        except ValuesNeedObjects:  # a stored value is not of the column's type: read as objects
            self._objects().prefetch(keys)

    def held_keys(self) -> list[Hashable]:
        """Every key that holds a value now: stored and not deleted since, or set in this run.
        The first call in a run reads all of the operator's stored keys, so this is for state
        that is small by construction (a window operator's open windows)."""
        return self._objects().held_keys()

    def get(self, key: Hashable) -> Any:
        """The value for ``key``; the initial state when the key has none."""
        return self._objects().get(key)

    def get_many(self, keys: Iterable[Hashable]) -> pd.Series:
        """Values for many keys at once, as a Series indexed by key (vectorized operators;
        ``keys`` may be that index already)."""
        index = keys if isinstance(keys, pd.Index) else pd.Index(list(keys), tupleize_cols=False)
        try:  # a read of the keys not seen yet comes first, and raises before anything changed
            return self._held.get_many(index)
        except ValuesNeedObjects:
            return self._objects().get_many(index)

    def get_values(self, keys: Sequence[Hashable]) -> list[Any]:
        """Values for many keys at once, as a list in the order of ``keys``."""
        try:
            return self._held.get_values(keys)
        except ValuesNeedObjects:
            return self._objects().get_values(keys)

    def normalized(self, key: Hashable, value: Any) -> Any:
        """``value`` as the codec gives it back after storing it (JSON: a tuple as a list, dict
        keys as strings), so what a function reads in this run is what a restart reads. A value
        the codec cannot store raises here, naming the operator and key. A typed state's
        values are stored as they are (or refused at the checkpoint, naming the key)."""
        if _scalar(value) or not isinstance(self._encoding, JsonEncoding):
            return value
        codec = self._encoding.codec
        return codec.decode(encode_value(codec, value, operator=self.name, key=key))

    def detached(self, value: Any) -> Any:
        """A copy of a stored ``value`` that can be changed in place without changing the
        state (only ``set`` does, as after a restart); immutable values as they are."""
        if _scalar(value):
            return value
        if not isinstance(self._encoding, JsonEncoding):  # a typed record: a flat dict
            return dict(value) if isinstance(value, dict) else value
        return self._encoding.codec.decode(self._encoding.codec.encode(value))

    def set(self, key: Hashable, value: Any) -> None:
        """Replace the value for ``key``; written at the next checkpoint."""
        self._objects().set(key, value)

    def set_many(self, values: pd.Series) -> None:
        """Replace the values of every key in the Series' index."""
        try:
            self._held.set_many(values)
        except ValuesNeedObjects:
            self._objects().set_many(values)

    def set_values(self, keys: Iterable[Hashable], values: Iterable[Any]) -> None:
        """Replace the value of each key by the value at the same position (what :meth:`set`
        does per key, a set operation at a time: windowed batches set tens of thousands)."""
        keys, values = list(keys), list(values)
        try:
            self._held.set_values(keys, values)
        except ValuesNeedObjects:
            self._objects().set_values(keys, values)

    def delete(self, key: Hashable) -> None:
        """Forget ``key``: a tombstone is written and the key reads as initial state again."""
        self.delete_many([key])

    def delete_many(self, keys: Iterable[Hashable]) -> None:
        """Forget every key in ``keys`` (see :meth:`delete`)."""
        self._held.delete_many(keys)

    def encode_changes(self) -> None:
        """Encode the values changed since the last call: a value the codec cannot store raises
        an :class:`EncodingError` naming the operator and key here, at the end of the batch
        that set it, before any of that batch's output is written."""
        self._held.encode_changes()

    def changed_rows(self) -> pd.DataFrame | pa.Table:
        """The rows the next checkpoint writes for this operator (encoded; raises on bad values):
        ``operator, key, value, deleted`` as pandas, or a typed state's columns as Arrow."""
        return self._held.changed_rows()

    def mark_checkpointed(self) -> None:
        self._held.mark_checkpointed()

    @property
    def changed_keys(self) -> int:
        return self._held.changed_keys

    @property
    def keys_held(self) -> int:
        return self._held.keys_held


class StateStore:
    """All managed state of one pipeline for one run, read as of checkpoint ``as_of``.

    Stored values are always read as of the checkpoint the run started from: whatever the run
    itself wrote since is already in memory, so a pipeline that started empty never reads state.
    """

    def __init__(self, spark: SparkSession | None, layout: PipelineLayout | None, as_of: int | None,
                 key_groups: int = DEFAULT_KEY_GROUPS, state_types: StateTypes | None = None):
        self._spark: SparkSession | None = spark
        #: the run's typed states (declared or inferred, settled once per run): what
        #: :meth:`operator` stores in typed columns
        self.state_types = state_types or StateTypes()
        self._layout: PipelineLayout | None = layout
        self._as_of = as_of
        self._key_groups = key_groups
        self._given: dict[str, dict[str, str]] | None = None
        self._given_entries: dict[str, pd.DataFrame] = {}
        self._files: tuple[str, tuple[int, int]] | None = None
        self._operators: dict[str, OperatorState] = {}
        self._entries: dict[str, EntryState] = {}
        self._timers: dict[str, Timers] = {}

    @classmethod
    def of_rows(cls, rows: pd.DataFrame) -> StateStore:
        """A store over stored values handed in (``operator, key, value`` rows, encoded; and
        an entry state's with its ``entry``), as an executor task gets them with its rows:
        nothing is read from tables, and there is no Spark session.

        >>> store = StateStore.of_rows(pd.DataFrame(
        ...     {"operator": ["sum"], "key": ['"a"'], "value": ["3"]}))
        >>> store.operator("sum", 0).get_values(["a", "b"])
        [3, 0]
        """
        store = cls(None, None, None)
        entries = rows["entry"].notna() if "entry" in rows.columns else pd.Series(False, rows.index)
        store._given = {str(name): dict(zip(part["key"], part["value"]))
                        for name, part in rows[~entries].groupby("operator", sort=False)}
        store._given_entries = {str(name): part[["key", "entry", "value"]]
                                for name, part in rows[entries].groupby("operator", sort=False)}
        return store

    @classmethod
    def of_files(cls, path: str, as_of: int | None, key_groups: int,
                 within: tuple[int, int], state_types: StateTypes | None = None) -> StateStore:
        """A store for an executor task whose keys are all of key groups ``within`` (``first,
        end``): it reads their state from the files of the ``_state`` table at ``path`` that
        hold those groups, as of checkpoint ``as_of`` (see :mod:`state.read.lookup`), without a
        Spark session. ``state_types``: the run's typed states."""
        store = cls(None, None, as_of, key_groups, state_types)
        store._files = (path, within)
        return store

    @property
    def handed_in(self) -> bool:
        """Whether this store runs in an executor task (:meth:`of_rows`, :meth:`of_files`):
        it holds no state but the task's keys' (no pipeline layout, no Spark session)."""
        return self._layout is None

    @property
    def spark(self) -> SparkSession | None:
        """The run's Spark session (for operators that read other tables); ``None`` on an
        executor."""
        return self._spark

    def operator(self, name: str, initial: Any = None, codec: str = "json",
                 columns: bool = False, state_type: StateType | None = None) -> OperatorState:
        """The state of operator ``name`` (created on first use; ``columns``: held in arrays
        when its values allow, for an operator that gets and sets whole Series; ``state_type``:
        stored in typed columns, see :class:`~state.run.encodings.TypedEncoding`; by default the
        type the run's :attr:`state_types` give ``name``, if any)."""
        if name not in self._operators:
            state_type = state_type or self.state_types.of(name)
            encoding = (self._json(name, codec) if state_type is None
                        else self._typed(name, state_type))
            self._operators[name] = OperatorState(name, initial, encoding, columns)
        return self._operators[name]

    def entries(self, name: str, columns: EntryColumns, codec: str = "pickle") -> EntryState:
        """The state ``name`` of many rows per key (a list's elements, a map's entries), kept
        in ``columns`` (see :mod:`state.run.entries`); created on first use."""
        if name not in self._entries:
            loader = None
            if self._given is not None:
                loader = partial(self._given_entry_values, columns=columns)
            elif self._as_of is not None:
                read = self._file_entries if self._files is not None else self._load_entries
                loader = partial(read, columns=columns)
            self._entries[name] = EntryState(name, columns, loader, self._key_groups, codec)
        return self._entries[name]

    def _json(self, name: str, codec: str) -> JsonEncoding:
        loader: Loader | None = None  # no checkpoint: nothing stored
        if self._given is not None:
            loader = self._given_values
        elif self._as_of is not None:
            loader = self._file_values if self._files is not None else self._load
        return JsonEncoding(name, codec_named(codec), loader)

    def _typed(self, name: str, state_type: StateType) -> TypedEncoding:
        if self._given is not None:  # the runtime sends typed state to tasks reading files
            raise StateError(f"state {name!r} is typed (state_type=): a task reads it from "
                             "_state's files, it is never handed in")
        path = self._files[0] if self._files is not None else self._layout_of().state
        key_type = lookup.column_types(path).get(KEY_PREFIX + name)
        loader: TypedLoader | None = None
        if self._as_of is not None:
            loader = partial(self._file_typed if self._files is not None else self._load_typed,
                             name)
        return TypedEncoding(name, state_type, key_type=key_type, key_groups=self._key_groups,
                             loader=loader, inferred_from=self.state_types.inferred.get(name))

    def _layout_of(self) -> PipelineLayout:
        assert self._layout is not None, "a store without a layout reads files or is handed rows"
        return self._layout

    def timers(self, operator: str, state: str | None = None) -> Timers:
        """The timers of ``operator`` (kept under ``state``, by default :func:`timer_state`),
        one object per run, so its queue of deadlines lasts from batch to batch."""
        name = state or timer_state(operator)
        if name not in self._timers:
            self._timers[name] = Timers(self.operator(name))
        return self._timers[name]

    def encode_changes(self) -> None:
        """Every operator's :meth:`OperatorState.encode_changes`."""
        for op in self._operators.values():
            op.encode_changes()
        for entries in self._entries.values():
            entries.encode_changes()

    def changed_rows(self) -> pd.DataFrame:
        """Every untyped operator's changed rows (``operator, key, value, deleted``); a typed
        state's are in :meth:`changes`."""
        return self.changes().rows

    def changes(self) -> StateRows:
        """Every operator's changed rows, for the checkpoint commit."""
        parts = [op.changed_rows() for op in self._operators.values() if op.changed_keys]
        frames = [part for part in parts if isinstance(part, pd.DataFrame)]
        rows = (pd.concat(frames, ignore_index=True) if frames
                else pd.DataFrame(columns=["operator", "key", "value", "deleted"]))
        return StateRows(rows, tuple(part for part in parts if isinstance(part, pa.Table)),
                         tuple(entries.changed_rows() for entries in self._entries.values()
                               if entries.changed_keys))

    def mark_checkpointed(self) -> None:
        for op in self._operators.values():
            op.mark_checkpointed()
        for entries in self._entries.values():
            entries.mark_checkpointed()

    def keys_held(self) -> dict[str, int]:
        """Per state name, the keys holding a value in memory now (see
        :attr:`OperatorState.keys_held`): what a run's metrics report of its state's size."""
        held = {name: op.keys_held for name, op in self._operators.items()}
        return held | {name: entries.keys_held for name, entries in self._entries.items()}

    def take_changes(self) -> StateRows:
        """The changes for a checkpoint; the store then counts changes anew, as after
        :meth:`mark_checkpointed` (a run takes them in its encoder thread, between batches)."""
        changes = self.changes()
        self.mark_checkpointed()
        return changes

    def _given_values(self, operator: str, keys: pa.Array | None) -> pa.Table:
        assert self._given is not None
        given = self._given.get(operator, {})
        held = list(given) if keys is None else [key for key in keys.to_pylist() if key in given]
        return Found.placed(keys, _stored(held, [given[key] for key in held]))

    def _file_values(self, operator: str, keys: pa.Array | None) -> Found:
        assert self._files is not None and self._as_of is not None
        path, within = self._files
        found = lookup.stored_values(path, operator, self._as_of, keys, self._key_groups, within)
        return _read_here(found, path, operator)

    def _file_typed(self, operator: str, keys: pa.Array | None, key_column: str,
                    value_columns: list[str]) -> Found:
        assert self._files is not None and self._as_of is not None
        path, within = self._files
        found = lookup.stored_typed_values(path, operator, self._as_of, keys, self._key_groups,
                                           key_column, value_columns, within=within)
        return _read_here(found, path, operator)

    def _load_typed(self, operator: str, keys: pa.Array | None, key_column: str,
                    value_columns: list[str]) -> Found:
        assert self._as_of is not None and self._spark is not None and self._layout is not None
        found = lookup.stored_typed_values(self._layout.state, operator, self._as_of, keys,
                                           self._key_groups, key_column, value_columns)
        if found is not None:
            return found
        rows = (tables.read(self._spark, self._layout.state)
                .where((F.col("operator") == operator) & (F.col("checkpoint_id") <= self._as_of)))
        if key_column not in rows.columns:  # no row of the state was ever committed
            no_rows = pa.table({name: pa.array([], pa.null()) for name in [key_column, *value_columns]})
            return Found(np.zeros(0 if keys is None else len(keys), bool), no_rows)
        rows = rows.where(F.col(key_column).isNotNull())
        if keys is not None:
            rows = rows.join(self._spark.createDataFrame(pa.table({key_column: keys})), key_column,
                             "left_semi")
        return Found.placed(keys, latest_per_key(rows).where(~F.col("deleted"))
                            .select(key_column, *value_columns).toArrow(), key_column)

    def _given_entry_values(self, operator: str, keys: pa.Array | None,
                            columns: EntryColumns) -> pa.Table:
        """The handed-in entries of ``keys``: a typed value comes as the JSON of its fields
        (see :func:`~state.contract.entries.value_json`)."""
        given = self._given_entries.get(operator, pd.DataFrame(columns=["key", "entry", "value"]))
        if keys is not None:
            given = given[given["key"].isin(keys.to_pylist())]
        return pa.table({"key": pa.array(given["key"].tolist(), pa.string()),
                         columns.entry: pa.array(given["entry"].tolist(), pa.string()),
                         **from_value_json(given["value"].tolist(), columns)})

    def _file_entries(self, operator: str, keys: pa.Array | None,
                      columns: EntryColumns) -> pa.Table:
        assert self._files is not None and self._as_of is not None
        path, within = self._files
        found = lookup.stored_entries(path, operator, self._as_of, keys, self._key_groups,
                                      columns, within)
        if found is None:  # the driver hands out of_files stores only for tables delta-rs reads
            raise StateError(f"{path}: the entries of state {operator!r} cannot be read without "
                             "Spark (deletion vectors or column mapping?)")
        return found

    def _load_entries(self, operator: str, keys: pa.Array | None,
                      columns: EntryColumns) -> pa.Table:
        assert self._as_of is not None and self._spark is not None and self._layout is not None
        found = lookup.stored_entries(self._layout.state, operator, self._as_of, keys,
                                      self._key_groups, columns)
        if found is not None:
            return found
        rows = (tables.read(self._spark, self._layout.state)
                .where((F.col("operator") == operator) & (F.col("checkpoint_id") <= self._as_of)))
        names = ["key", columns.entry, *columns.value_columns]
        if columns.entry not in rows.columns:  # no entry was ever committed
            types = {"key": pa.string(), columns.entry: pa.string(), **columns.arrow_types()}
            return pa.table({name: pa.array([], types[name]) for name in names})
        rows = rows.where(F.col(columns.entry).isNotNull())
        if keys is not None:
            rows = rows.join(self._spark.createDataFrame(pa.table({"key": keys})), "key", "left_semi")
        return latest_per_key(rows).where(~F.col("deleted")).select(*names).toArrow()

    def _load(self, operator: str, keys: pa.Array | None) -> Found:
        # operator() hands out this loader only with a checkpoint (and a session)
        assert self._as_of is not None and self._spark is not None
        assert self._layout is not None
        found = lookup.stored_values(self._layout.state, operator, self._as_of, keys, self._key_groups)
        if found is not None:
            return found
        latest = latest_values(self._spark, self._layout, operator, self._as_of,
                                None if keys is None else keys.to_pylist())
        return Found.placed(keys, _stored(latest["key"].tolist(), latest["value"].tolist()))


def _read_here(found: Found | None, path: str, operator: str) -> Found:
    """What a task read of ``operator``'s state without Spark (``None``: it could not)."""
    if found is None:  # the driver hands out of_files stores only for tables delta-rs reads
        raise StateError(f"{path}: the state of operator {operator!r} cannot be read without "
                         "Spark (deletion vectors or column mapping?)")
    return found


def _stored(keys: list[str], values: list[str]) -> pa.Table:
    """Encoded ``keys`` and their stored ``values``, as a :data:`Loader` gives them."""
    return pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(values, pa.string())})


def _scalar(value: Any) -> bool:
    """Whether a codec stores ``value`` and gives back an equal value of the same type."""
    return value is None or type(value) in (int, float, str, bool)



