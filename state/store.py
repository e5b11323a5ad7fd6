"""Managed operator state: per-key (or unkeyed) values cached for a run, changes kept until a checkpoint."""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import compress, filterfalse, repeat
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import lookup, tables
from .codecs import (
    Codec,
    codec_named,
    decode_key,
    decode_values,
    encode_keys,
    encode_value,
)
from .errors import StateError
from .keygroups import DEFAULT_KEY_GROUPS
from .layout import PipelineLayout
from .timers import Timers, timer_state

_MISSING = object()
_DROPPED = 2  # an encoded change's "deleted": the key is to be written with no row at all

#: ``(operator, encoded keys)`` -> the stored ``key, value`` (encoded) of those keys that hold
#: a value, in any order; every key's, for ``None``.
Loader = Callable[[str, list[str] | None], pa.Table]


class OperatorState:
    """The state of one operator during a run.

    Values are loaded from the ``_state`` table the first time a key is seen in the run (only the
    batch's keys, never the whole table) and kept in memory; ``set`` marks a key changed until the
    next checkpoint writes it. Without a ``loader`` (the pipeline never checkpointed) nothing is
    stored, so nothing is read. A key deleted before any checkpoint held a value for it (a window
    opened and closed between two checkpoints) needs no tombstone, and gets none.
    """

    def __init__(self, name: str, initial: Any, codec: Codec, loader: Loader | None):
        self.name = name
        self._initial = initial
        self._codec = codec
        self._loader = loader
        self._values: dict[Hashable, Any] = {}
        # Keys loaded or written in this run -> whether the last checkpoint holds a value for
        # them; None when not known (set without being read). Without a loader the run started
        # from no checkpoint, so a key it has not checkpointed holds none.
        self._stored: dict[Hashable, bool | None] = {}
        self._unread = False if loader is None else None
        self._changed: set[Hashable] = set()
        self._dirty: set[Hashable] = set()  # changed since the last encode_changes()
        # their rows, a frame per encode_changes(); a later frame's row replaces an earlier's
        self._encoded: list[pd.DataFrame] = []
        # keys whose value in _values is the initial state handed out by a read, not a value
        self._placeholders: set[Hashable] = set()
        self._read_all = loader is None

    def prefetch(self, keys: Iterable[Hashable]) -> None:
        """Load the stored values of ``keys`` not yet seen in this run, in one read."""
        if self._loader is None or self._read_all:  # nothing stored, or all of it read already
            return
        wanted = list(filterfalse(self._stored.__contains__, dict.fromkeys(keys)))
        if not wanted:
            return
        encoded = encode_keys(wanted)
        self._take(wanted, encoded, self._loader(self.name, encoded))

    def _take(self, keys: list[Hashable], encoded: list[str], stored: pa.Table) -> None:
        """Cache the stored values (``stored``: by encoded key) of ``keys``, not yet seen in
        this run. Column operations, no call per key: a run's first batch may take 600k."""
        found = pc.index_in(pa.array(encoded, pa.string()), value_set=stored["key"])
        held = pc.is_valid(found).to_numpy(zero_copy_only=False)
        holding = list(compress(keys, held))
        texts = pc.take(stored["value"], pc.drop_null(found))
        self._values.update(zip(holding, decode_values(self._codec, texts, holding,
                                                       operator=self.name)))
        self._stored.update(zip(keys, held.tolist()))

    def held_keys(self) -> list[Hashable]:
        """Every key that holds a value now: stored and not deleted since, or set in this run.
        The first call in a run reads all of the operator's stored keys, so this is for state
        that is small by construction (a window operator's open windows).

        >>> state = StateStore.of_rows(pd.DataFrame(
        ...     {"operator": ["w", "w"], "key": ['"a"', '"b"'], "value": ["1", "2"]})).operator("w")
        >>> state.delete("a"); state.set("c", 3); state.get("d")
        >>> sorted(state.held_keys())
        ['b', 'c']
        """
        if not self._read_all:
            assert self._loader is not None
            stored = self._loader(self.name, None)
            unseen = [(decode_key(text), text) for text in stored["key"].to_pylist()]
            unseen = [(key, text) for key, text in unseen if key not in self._stored]
            self._take([key for key, _ in unseen], [text for _, text in unseen], stored)
            self._read_all = True
            self._unread = False  # every stored key is now known: any other key holds nothing
        return [key for key in self._values if key not in self._placeholders]

    def get(self, key: Hashable) -> Any:
        """The value for ``key``; the initial state when the key has none."""
        self.prefetch([key])
        return self._value_of(key)

    def get_many(self, keys: Iterable[Hashable]) -> pd.Series:
        """Values for many keys at once, as a Series indexed by key (vectorized operators;
        ``keys`` may be that index already)."""
        index = keys if isinstance(keys, pd.Index) else pd.Index(list(keys), tupleize_cols=False)
        return _series(self.get_values(index.tolist()), index)

    def get_values(self, keys: Sequence[Hashable]) -> list[Any]:
        """Values for many keys at once, as a list in the order of ``keys``."""
        self.prefetch(keys)
        held = self._values.get
        if _immutable(self._initial):  # a key without a value reads as the initial state itself
            return list(map(held, keys, repeat(self._initial)))  # a lookup per key, in C
        values = [held(key, _MISSING) for key in keys]
        for position, value in enumerate(values):
            if value is _MISSING:
                values[position] = self._value_of(keys[position])
        return values

    def _value_of(self, key: Hashable) -> Any:
        value = self._values.get(key, _MISSING)
        if value is _MISSING:
            if _immutable(self._initial):  # nothing to hold: every read gives the same value
                return self._initial
            # a fresh copy, so a mutable initial state (dict, list) is never shared between keys,
            # held so that changes made to it in place are seen by the next read
            value = copy.deepcopy(self._initial)
            self._values[key] = value
            self._placeholders.add(key)
        return value

    def normalized(self, key: Hashable, value: Any) -> Any:
        """``value`` as the codec gives it back after storing it (JSON: a tuple as a list, dict
        keys as strings), so what a function reads in this run is what a restart reads. A value
        the codec cannot store raises here, naming the operator and key."""
        if _scalar(value):
            return value
        return self._codec.decode(encode_value(self._codec, value, operator=self.name, key=key))

    def detached(self, value: Any) -> Any:
        """A copy of a stored ``value`` that can be changed in place without changing the
        state (only ``set`` does, as after a restart); immutable values as they are."""
        return value if _scalar(value) else self._codec.decode(self._codec.encode(value))

    def set(self, key: Hashable, value: Any) -> None:
        """Replace the value for ``key``; written at the next checkpoint."""
        self._stored.setdefault(key, self._unread)
        self._values[key] = value
        self._placeholders.discard(key)
        self._changed.add(key)
        self._dirty.add(key)

    def set_many(self, values: pd.Series) -> None:
        """Replace the values of every key in the Series' index."""
        self.set_values(values.index, values.tolist())

    def set_values(self, keys: Iterable[Hashable], values: Iterable[Any]) -> None:
        """Replace the value of each key by the value at the same position (what :meth:`set`
        does per key, a set operation at a time: windowed batches set tens of thousands)."""
        keys = list(keys)
        self._note_stored(keys)
        self._values.update(zip(keys, values))
        if self._placeholders:
            self._placeholders.difference_update(keys)
        self._changed.update(keys)
        self._dirty.update(keys)

    def _note_stored(self, keys: list[Hashable]) -> None:
        """Keys not seen before in this run: whether the last checkpoint holds them is what
        the run knows of unread keys."""
        stored = self._stored
        unseen = list(filterfalse(stored.__contains__, keys))
        if unseen:
            stored.update(dict.fromkeys(unseen, self._unread))

    def delete(self, key: Hashable) -> None:
        """Forget ``key``: a tombstone is written and the key reads as initial state again."""
        self.delete_many([key])

    def delete_many(self, keys: Iterable[Hashable]) -> None:
        """Forget every key in ``keys`` (see :meth:`delete`)."""
        keys = list(keys)
        self._note_stored(keys)
        pop = self._values.pop
        for key in keys:
            pop(key, None)
        if self._placeholders:
            self._placeholders.difference_update(keys)
        self._changed.update(keys)
        self._dirty.update(keys)

    def encode_changes(self) -> None:
        """Encode the values changed since the last call: a value the codec cannot store raises
        an :class:`EncodingError` naming the operator and key here, at the end of the batch
        that set it, before any of that batch's output is written."""
        # A few passes over lists rather than one loop with a call per key: a windowed batch
        # changes tens of thousands of keys, and this runs between two batches.
        if not self._dirty:
            return
        values, stored, unread, name = self._values, self._stored, self._unread, self.name
        held = list(filter(values.__contains__, self._dirty))
        gone = list(filterfalse(values.__contains__, self._dirty))
        try:
            texts = self._codec.encode_many(list(map(values.__getitem__, held)))
        except Exception:
            for key in held:  # find the value, and raise naming its key
                encode_value(self._codec, values[key], operator=name, key=key)
            raise
        # a key set and deleted again before any checkpoint held it writes nothing (and a row
        # encoded for it earlier is dropped: DROPPED)
        never_held = np.fromiter((stored.get(key, unread) is False for key in gone), bool, len(gone))
        self._encoded.append(pd.DataFrame({
            "operator": name, "key": encode_keys(held + gone),
            "value": pd.array(texts + [None] * len(gone), dtype=object),
            "deleted": np.concatenate([np.zeros(len(held), np.int8),
                                       np.where(never_held, _DROPPED, 1).astype(np.int8)])}))
        self._dirty.clear()

    def changed_rows(self) -> pd.DataFrame:
        """The rows the next checkpoint writes for this operator (encoded; raises on bad values)."""
        self.encode_changes()
        if not self._encoded:
            return pd.DataFrame(columns=["operator", "key", "value", "deleted"])
        rows = self._encoded[0]
        if len(self._encoded) > 1:  # the same key changed by several batches: its last change
            rows = pd.concat(self._encoded, ignore_index=True).drop_duplicates("key", keep="last")
        rows = rows[rows["deleted"] != _DROPPED] if (rows["deleted"] == _DROPPED).any() else rows
        return rows.astype({"deleted": bool}).reset_index(drop=True)

    def mark_checkpointed(self) -> None:
        self._stored.update(zip(self._changed, map(self._values.__contains__, self._changed)))
        self._changed.clear()
        self._encoded.clear()

    @property
    def changed_keys(self) -> int:
        return len(self._changed)


class StateStore:
    """All managed state of one pipeline for one run, read as of checkpoint ``as_of``.

    Stored values are always read as of the checkpoint the run started from: whatever the run
    itself wrote since is already in memory, so a pipeline that started empty never reads state.
    """

    def __init__(self, spark: SparkSession | None, layout: PipelineLayout | None, as_of: int | None,
                 key_groups: int = DEFAULT_KEY_GROUPS):
        self._spark: SparkSession | None = spark
        self._layout: PipelineLayout | None = layout
        self._as_of = as_of
        self._key_groups = key_groups
        self._given: dict[str, dict[str, str]] | None = None
        self._files: tuple[str, tuple[int, int]] | None = None
        self._operators: dict[str, OperatorState] = {}
        self._timers: dict[str, Timers] = {}

    @classmethod
    def of_rows(cls, rows: pd.DataFrame) -> StateStore:
        """A store over stored values handed in (``operator, key, value`` rows, encoded), as an
        executor task gets them with its rows: nothing is read from tables, and there is no
        Spark session.

        >>> store = StateStore.of_rows(pd.DataFrame(
        ...     {"operator": ["sum"], "key": ['"a"'], "value": ["3"]}))
        >>> store.operator("sum", 0).get_values(["a", "b"])
        [3, 0]
        """
        store = cls(None, None, None)
        store._given = {str(name): dict(zip(part["key"], part["value"]))
                        for name, part in rows.groupby("operator", sort=False)}
        return store

    @classmethod
    def of_files(cls, path: str, as_of: int, key_groups: int, within: tuple[int, int]) -> StateStore:
        """A store for an executor task whose keys are all of key groups ``within`` (``first,
        end``): it reads their state from the files of the ``_state`` table at ``path`` that
        hold those groups, as of checkpoint ``as_of`` (see :mod:`state.lookup`), without a
        Spark session."""
        store = cls(None, None, as_of, key_groups)
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

    def operator(self, name: str, initial: Any = None, codec: str = "json") -> OperatorState:
        """The state of operator ``name`` (created on first use)."""
        if name not in self._operators:
            loader: Loader | None = None  # no checkpoint: nothing stored
            if self._given is not None:
                loader = self._given_values
            elif self._as_of is not None:
                loader = self._file_values if self._files is not None else self._load
            self._operators[name] = OperatorState(name, initial, codec_named(codec), loader)
        return self._operators[name]

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

    def changed_rows(self) -> pd.DataFrame:
        """Every operator's changed rows, for the checkpoint commit."""
        frames = [op.changed_rows() for op in self._operators.values() if op.changed_keys]
        if not frames:
            return pd.DataFrame(columns=["operator", "key", "value", "deleted"])
        return pd.concat(frames, ignore_index=True)

    def mark_checkpointed(self) -> None:
        for op in self._operators.values():
            op.mark_checkpointed()

    def take_changes(self) -> pd.DataFrame:
        """The changed rows for a checkpoint; the store then counts changes anew, as after
        :meth:`mark_checkpointed` (a run takes them in its encoder thread, between batches)."""
        rows = self.changed_rows()
        self.mark_checkpointed()
        return rows

    def _given_values(self, operator: str, keys: list[str] | None) -> pa.Table:
        assert self._given is not None
        given = self._given.get(operator, {})
        held = list(given) if keys is None else [key for key in keys if key in given]
        return _stored(held, [given[key] for key in held])

    def _file_values(self, operator: str, keys: list[str] | None) -> pa.Table:
        assert self._files is not None and self._as_of is not None
        path, within = self._files
        found = lookup.stored_values(path, operator, self._as_of, keys, self._key_groups, within)
        if found is None:  # the driver hands out of_files stores only for tables delta-rs reads
            raise StateError(f"{path}: the state of operator {operator!r} cannot be read without "
                             "Spark (deletion vectors or column mapping?)")
        return found

    def _load(self, operator: str, keys: list[str] | None) -> pa.Table:
        # operator() hands out this loader only with a checkpoint (and a session)
        assert self._as_of is not None and self._spark is not None
        assert self._layout is not None
        found = lookup.stored_values(self._layout.state, operator, self._as_of, keys, self._key_groups)
        if found is not None:
            return found
        latest = _latest_values(self._spark, self._layout, operator, self._as_of, keys)
        return _stored(latest["key"].tolist(), latest["value"].tolist())


def _stored(keys: list[str], values: list[str]) -> pa.Table:
    """Encoded ``keys`` and their stored ``values``, as a :data:`Loader` gives them."""
    return pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(values, pa.string())})


def _series(values: list[Any], index: pd.Index) -> pd.Series:
    """``values`` as a Series on ``index``, typed as pandas would infer it. Plain ints or
    floats (a sum, a count: the usual vectorized state) skip pandas' inference, which looks
    at each object in turn: 20 ms per 100k keys, against 2."""
    kinds = set(map(type, values))
    for kind, dtype in ((int, np.int64), (float, np.float64)):
        if kinds == {kind}:
            try:
                return pd.Series(np.fromiter(values, dtype, len(values)), index=index)
            except OverflowError:  # an int beyond 64 bits: pandas keeps it as an object
                break
    return pd.Series(values, index=index, dtype=None if values else object)


def _scalar(value: Any) -> bool:
    """Whether a codec stores ``value`` and gives back an equal value of the same type."""
    return value is None or type(value) in (int, float, str, bool)


def _immutable(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bytes, bool, frozenset))


def _latest_values(spark: SparkSession, layout: PipelineLayout, operator: str, as_of: int,
                   keys: list[str] | None = None) -> pd.DataFrame:
    """Latest ``key, value`` per key of ``operator`` up to checkpoint ``as_of`` (tombstones dropped)."""
    rows = (tables.read(spark, layout.state)
            .where((F.col("operator") == operator) & (F.col("checkpoint_id") <= as_of)))
    if keys is not None:
        rows = tables.only_keys(spark, rows, pd.DataFrame({"key": keys}))
    return latest_per_key(rows).where(~F.col("deleted")).select("key", "value").toPandas()


def stored_values(spark: SparkSession, layout: PipelineLayout, operators: list[str],
                  as_of: int | None, keys: DataFrame | None = None) -> DataFrame:
    """The stored ``operator, key, value`` of ``operators`` as of checkpoint ``as_of`` (only
    those of ``keys``, a frame of encoded ``key``s, when given), as a lazy Spark DataFrame:
    executors read it, the driver never does. Empty before the first checkpoint."""
    if as_of is None or not tables.exists(spark, layout.state):
        return spark.createDataFrame([], "operator string, key string, value string")
    rows = (tables.read(spark, layout.state)
            .where(F.col("operator").isin(operators) & (F.col("checkpoint_id") <= as_of)))
    if keys is not None:  # before the latest-per-key aggregation, which then sees only these
        rows = rows.join(keys, "key", "left_semi")
    return latest_per_key(rows).where(~F.col("deleted")).select("operator", "key", "value")


def latest_per_key(rows: DataFrame) -> DataFrame:
    """The newest changelog row of each (operator, key): what the state is after ``rows``."""
    return (rows.groupBy("operator", "key")
            .agg(F.max_by(F.struct("value", "deleted", "checkpoint_id"), "checkpoint_id")
                 .alias("last"))
            .select("operator", "key", "last.value", "last.deleted", "last.checkpoint_id"))
