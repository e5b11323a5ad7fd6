"""Operator state held as a Python object per key: any value its encoding stores.

>>> from state.contract.codecs import JsonCodec
>>> from state.run.encodings import JsonEncoding
>>> held = ObjectValues("sum", 0, JsonEncoding("sum", JsonCodec(), loader=None))
>>> held.set_values(["a", "b"], [3, {"n": 1}]); held.delete_many(["b"])
>>> held.get_values(["a", "b"]), held.changed_keys, held.changed_rows()["key"].tolist()
([3, 0], 2, ['"a"'])
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable, Sequence
from itertools import compress, filterfalse, repeat
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .encodings import Encoding
from .held import DROPPED

_MISSING = object()


class ObjectValues:
    """The state of one operator during a run, a Python object per key (a :class:`HeldValues`).

    Values are loaded from the ``_state`` table the first time a key is seen in the run (only the
    batch's keys, never the whole table) and kept in memory; ``set`` marks a key changed until the
    next checkpoint writes it; ``encoding`` says how values are read and written. When it loads
    nothing (the pipeline never checkpointed) nothing is stored, so nothing is read. A key
    deleted before any checkpoint held a value for it (a window opened and closed between two
    checkpoints) needs no tombstone, and gets none.
    """

    def __init__(self, name: str, initial: Any, encoding: Encoding):
        self.name = name
        self._initial = initial
        self._encoding = encoding
        self._values: dict[Hashable, Any] = {}
        # Keys loaded or written in this run -> whether the last checkpoint holds a value for
        # them; None when not known (set without being read). With nothing to load the run started
        # from no checkpoint, so a key it has not checkpointed holds none.
        self._stored: dict[Hashable, bool | None] = {}
        self._unread = None if encoding.loads else False
        self._changed: set[Hashable] = set()
        self._dirty: set[Hashable] = set()  # changed since the last encode_changes()
        # their rows, a frame per encode_changes(); a later frame's row replaces an earlier's
        self._encoded: list[Any] = []
        # keys whose value in _values is the initial state handed out by a read, not a value
        self._placeholders: set[Hashable] = set()
        self._read_all = not encoding.loads

    @classmethod
    def taking_over(cls, name: str, initial: Any, encoding: Encoding, *,
                    values: dict[Hashable, Any], stored: dict[Hashable, bool | None],
                    changed: set[Hashable], dirty: set[Hashable],
                    encoded: list[Any]) -> ObjectValues:
        """The state another representation held, from now on held here: its values, what it
        knows of what the last checkpoint stored, and its changes since."""
        held = cls(name, initial, encoding)
        held._values, held._stored = values, stored
        held._changed, held._dirty, held._encoded = changed, dirty, encoded
        return held

    def prefetch(self, keys: Iterable[Hashable]) -> None:
        """Load the stored values of ``keys`` not yet seen in this run, in one read."""
        if self._read_all:  # nothing stored, or all of it read already
            return
        wanted = list(filterfalse(self._stored.__contains__, dict.fromkeys(keys)))
        if wanted:
            self._take(wanted, *self._encoding.load(wanted))

    def _take(self, keys: list[Hashable], held: np.ndarray, stored: pa.Array) -> None:
        """Cache the ``stored`` values of the ``held`` ones of ``keys``, not yet seen in this
        run. Column operations, no call per key: a run's first batch may take 600k."""
        holding = list(compress(keys, held))
        self._values.update(zip(holding, self._encoding.objects(stored, holding)))
        self._stored.update(zip(keys, held.tolist()))

    def held_keys(self) -> list[Hashable]:
        """Every key that holds a value now: stored and not deleted since, or set in this run.
        The first call in a run reads all of the operator's stored keys, so this is for state
        that is small by construction (a window operator's open windows)."""
        if not self._read_all:
            keys, stored = self._encoding.load_all()
            unseen = np.array([key not in self._stored for key in keys], bool)
            self._take(list(compress(keys, unseen)), np.ones(int(unseen.sum()), bool),
                       stored.filter(pa.array(unseen)))
            self._read_all = True
            self._unread = False  # every stored key is now known: any other key holds nothing
        return [key for key in self._values if key not in self._placeholders]

    def get(self, key: Hashable) -> Any:
        """The value for ``key``; the initial state when the key has none."""
        self.prefetch([key])
        return self._value_of(key)

    def get_many(self, index: pd.Index) -> pd.Series:
        return _series(self.get_values(index.tolist()), index)

    def get_values(self, keys: Sequence[Hashable]) -> list[Any]:
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

    def set(self, key: Hashable, value: Any) -> None:
        """Replace the value for ``key``; written at the next checkpoint."""
        self._stored.setdefault(key, self._unread)
        self._values[key] = value
        self._placeholders.discard(key)
        self._changed.add(key)
        self._dirty.add(key)

    def set_many(self, values: pd.Series) -> None:
        self.set_values(values.index, values.tolist())

    def set_values(self, keys: Iterable[Hashable], values: Iterable[Any]) -> None:
        """What :meth:`set` does per key, a set operation at a time: windowed batches set
        tens of thousands."""
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

    def delete_many(self, keys: Iterable[Hashable]) -> None:
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
        """Encode the values changed since the last call: a value the encoding cannot store raises
        an :class:`EncodingError` naming the operator and key here, at the end of the batch
        that set it, before any of that batch's output is written."""
        # A few passes over lists rather than one loop with a call per key: a windowed batch
        # changes tens of thousands of keys, and this runs between two batches.
        if not self._dirty:
            return
        values, stored, unread = self._values, self._stored, self._unread
        held = list(filter(values.__contains__, self._dirty))
        gone = list(filterfalse(values.__contains__, self._dirty))
        # a key set and deleted again before any checkpoint held it writes nothing (and a row
        # encoded for it earlier is dropped: DROPPED)
        never_held = np.fromiter((stored.get(key, unread) is False for key in gone), bool, len(gone))
        deleted = np.concatenate([np.zeros(len(held), np.int8),
                                  np.where(never_held, DROPPED, 1).astype(np.int8)])
        self._encoded.append(self._encoding.changes(held + gone, list(map(values.__getitem__, held)),
                                                    deleted))
        self._dirty.clear()

    def changed_rows(self) -> pd.DataFrame | pa.Table:
        self.encode_changes()
        return self._encoding.checkpoint_rows(self._encoded)

    def mark_checkpointed(self) -> None:
        self._stored.update(zip(self._changed, map(self._values.__contains__, self._changed)))
        self._changed.clear()
        self._encoded.clear()

    @property
    def changed_keys(self) -> int:
        return len(self._changed)

    @property
    def keys_held(self) -> int:
        return len(self._values) - len(self._placeholders)


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


def _immutable(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bytes, bool, frozenset))
