"""Numeric operator state held as columns: a key index and arrays, not a Python object per key.

A vectorized operator whose initial state is an int or a float (a sum, a count, a last price)
gets and sets its keys' values as whole Series. Held here, a batch of 600k keys is read from
``_state``, looked up, set and encoded with array operations: the keys are found through a hash
index, the values live in one NumPy array, and the changed ones are turned into JSON text by
Arrow (ints) in one cast. What a checkpoint writes is byte for byte what
:class:`~state.run.objects.ObjectValues` writes for the same values (the JSON of the number), so a
state moves between the two representations, and between releases, freely.

A value that is not of the column's type (a float set into an int state, a dict, an int too
large for 64 bits, a stored text that is not such a number) raises :class:`ValuesNeedObjects`
before anything changes; the operator's state is then held as objects for the rest of the run.

>>> from state.contract.codecs import JsonCodec
>>> from state.run.encodings import JsonEncoding
>>> held = ColumnValues("sum", 0, JsonEncoding("sum", JsonCodec(), loader=None))
>>> held.set_many(pd.Series([5, 7], index=[1, 2])); held.delete_many([2])
>>> held.get_many(pd.Index([1, 2, 3])).tolist(), held.changed_rows()["value"].tolist()
([5, 0, 0], ['5'])
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from itertools import compress, repeat
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .encodings import Encoding
from .held import DROPPED, ValuesNeedObjects
from .objects import ObjectValues

#: what the last checkpoint holds for a key, as an int8: a value, none, or not known (the key
#: was set without being read)
_STORED, _NOT_STORED, _UNKNOWN = 1, 0, -1
_STORED_AS = np.array([False, True, None], dtype=object)  # indexed by those codes (-1: last)

#: keys added a few at a time are kept in a dict until they are this many, or a quarter of the
#: indexed keys: a small batch then never rebuilds the hash index of a large state
_RECENT_KEYS = 4096


class ColumnValues:
    """Numeric state of one operator during a run, in arrays (a :class:`HeldValues`).

    Per key position: the value, whether the key holds one (set, or stored and not deleted),
    what the last checkpoint holds for it, and whether it changed since the last checkpoint
    and since the last :meth:`encode_changes`. Positions are never reused within a run.
    """

    def __init__(self, name: str, initial: int | float, encoding: Encoding):
        dtype = encoding.column_dtype(initial)
        assert dtype is not None, "ColumnValues.holds() decides"
        self.name = name
        self._initial = initial
        self._encoding = encoding
        self._dtype = dtype
        self._unread = _UNKNOWN if encoding.loads else _NOT_STORED
        self._keys = KeyPositions()
        self._values = np.zeros(0, self._dtype)
        self._holding = np.zeros(0, bool)
        self._stored = np.zeros(0, np.int8)
        self._changed = np.zeros(0, bool)
        self._dirty = np.zeros(0, bool)  # changed since the last encode_changes()
        self._encoded: list[Any] = []

    @staticmethod
    def holds(initial: Any, encoding: Encoding) -> bool:
        """Whether state of this initial value can be held as a column by ``encoding``
        (numbers: an int of 64 bits, or a float; not a bool)."""
        return encoding.column_dtype(initial) is not None

    def prefetch(self, keys: Iterable[Hashable]) -> None:
        if not self._encoding.loads:  # the run started from no checkpoint: nothing is stored
            return
        index = _index(keys)
        unseen = index[self._keys.find(index) < 0].unique()
        if not len(unseen):
            return
        holding, stored = self._encoding.load(unseen)
        values = np.zeros(len(unseen), self._dtype)
        values[holding] = self._encoding.numbers(stored, unseen[holding], self._dtype)
        self._add(unseen, values, holding, holding.astype(np.int8))

    def get_many(self, index: pd.Index) -> pd.Series:
        self.prefetch(index)
        positions = self._keys.find(_index(index))
        values = np.full(len(index), self._initial, self._dtype)
        known = np.flatnonzero(positions >= 0)
        at = positions[known]
        values[known] = np.where(self._holding[at], self._values[at], self._initial)
        return pd.Series(values, index=index)

    def get_values(self, keys: Sequence[Hashable]) -> list[Any]:
        return self.get_many(_index(keys)).tolist()

    def set_many(self, values: pd.Series) -> None:
        if not len(values):
            return
        numbers = self._fitting(values)
        positions = self._positions(_index(values.index))
        self._values[positions] = numbers  # a key given twice: its last value, as in a dict
        self._holding[positions] = True
        self._changed[positions] = True
        self._dirty[positions] = True

    def set_values(self, keys: Iterable[Hashable], values: Iterable[Any]) -> None:
        index = _index(keys)
        self.set_many(pd.Series(list(values), index=index, dtype=None if len(index) else self._dtype))

    def _fitting(self, values: pd.Series) -> np.ndarray:
        """``values`` as this column's dtype, if they are of its kind; else ValuesNeedObjects
        (a float set into an int state stays a float, as JSON would store it)."""
        dtype = values.dtype
        if isinstance(dtype, np.dtype) and dtype.kind == self._dtype.kind:
            return values.to_numpy(self._dtype)
        if isinstance(dtype, np.dtype) and self._dtype.kind == "i" and dtype.kind == "u":
            if not len(values) or values.max() < 2**63:
                return values.to_numpy(self._dtype)
        raise ValuesNeedObjects(f"{self.name}: values of dtype {dtype} in a {self._dtype} state")

    def delete_many(self, keys: Iterable[Hashable]) -> None:
        positions = self._positions(_index(keys))
        self._holding[positions] = False
        self._changed[positions] = True
        self._dirty[positions] = True

    def _positions(self, index: pd.Index) -> np.ndarray:
        """The positions of ``index``'s keys, adding those not seen before in this run (whether
        the last checkpoint holds them is what the run knows of unread keys)."""
        positions = self._keys.find(index)
        if (positions < 0).any():
            new = index[positions < 0].unique()
            self._add(new, np.zeros(len(new), self._dtype), np.zeros(len(new), bool),
                      np.full(len(new), self._unread, np.int8))
            positions = self._keys.find(index)
        return positions

    def _add(self, keys: pd.Index, values: np.ndarray, holding: np.ndarray,
             stored: np.ndarray) -> None:
        """Positions for ``keys`` (none seen before), after the last one."""
        start = len(self._keys)
        end = start + len(keys)
        self._values, self._holding, self._stored, self._changed, self._dirty = (
            _room_for(array, end) for array in
            (self._values, self._holding, self._stored, self._changed, self._dirty))
        self._values[start:end] = values
        self._holding[start:end] = holding
        self._stored[start:end] = stored
        self._keys.add(keys)

    def encode_changes(self) -> None:
        """Encode the values changed since the last call (numbers always encode)."""
        dirty = np.flatnonzero(self._dirty[:len(self._keys)])
        if not len(dirty):
            return
        holding = self._holding[dirty]
        held, gone = dirty[holding], dirty[~holding]
        keys = self._keys.keys_at(np.concatenate([held, gone]))
        # a key set and deleted again before any checkpoint held it writes nothing (and a row
        # encoded for it earlier is dropped: DROPPED)
        never_held = self._stored[gone] == _NOT_STORED
        deleted = np.concatenate([np.zeros(len(held), np.int8),
                                  np.where(never_held, DROPPED, 1).astype(np.int8)])
        self._encoded.append(self._encoding.changes(keys, self._values[held], deleted))
        self._dirty[dirty] = False

    def changed_rows(self) -> pd.DataFrame | pa.Table:
        self.encode_changes()
        return self._encoding.checkpoint_rows(self._encoded)

    def mark_checkpointed(self) -> None:
        changed = np.flatnonzero(self._changed[:len(self._keys)])
        self._stored[changed] = self._holding[changed]
        self._changed[changed] = False
        self._encoded.clear()

    @property
    def changed_keys(self) -> int:
        return int(np.count_nonzero(self._changed[:len(self._keys)]))

    @property
    def keys_held(self) -> int:
        return int(np.count_nonzero(self._holding[:len(self._keys)]))

    def as_objects(self) -> ObjectValues:
        """The same state, values, changes and all, as a Python object per key."""
        size = len(self._keys)
        keys = self._keys.keys_at(np.arange(size)).tolist()
        holding = self._holding[:size]
        return ObjectValues.taking_over(
            self.name, self._initial, self._encoding,
            values=dict(zip(compress(keys, holding), self._values[:size][holding].tolist())),
            stored=dict(zip(keys, _STORED_AS[self._stored[:size]])),
            changed=set(compress(keys, self._changed[:size])),
            dirty=set(compress(keys, self._dirty[:size])), encoded=self._encoded)


class KeyPositions:
    """Each key's position in a state's arrays, positions given in the order keys are added.

    Keys added in bulk go into a hash index (a pandas ``Index``: found for a whole batch in C);
    keys added a few at a time go into a dict until they are a quarter of the indexed ones, and
    are then indexed with them. A batch of a few new keys thus never rebuilds the index of a
    state of millions, and the rebuilds cost O(1) per key over a run.

    >>> positions = KeyPositions(); positions.add(pd.Index([10, 20])); positions.add(pd.Index([5]))
    >>> positions.find(pd.Index([5, 10, 7])).tolist(), positions.keys_at(np.array([2, 0])).tolist()
    ([2, 0, -1], [5, 10])
    """

    def __init__(self) -> None:
        self._indexed = pd.Index([])
        self._recent: dict[Hashable, int] = {}
        self._recent_keys: list[Hashable] = []

    def __len__(self) -> int:
        return len(self._indexed) + len(self._recent_keys)

    def find(self, keys: pd.Index) -> np.ndarray:
        """The position of each of ``keys``; -1 for a key not added."""
        if len(self._indexed):
            found = self._indexed.get_indexer(keys).astype(np.int64, copy=False)
        else:
            found = np.full(len(keys), -1, np.int64)
        if self._recent:
            missing = np.flatnonzero(found < 0)
            found[missing] = np.fromiter(map(self._recent.get, keys[missing], repeat(-1)),
                                         np.int64, len(missing))
        return found

    def add(self, keys: pd.Index) -> None:
        """Give ``keys`` (unique, none added before) the next positions."""
        if len(self._recent_keys) + len(keys) <= max(len(self._indexed) // 4, _RECENT_KEYS):
            start = len(self)
            self._recent.update(zip(keys, range(start, start + len(keys))))
            self._recent_keys.extend(keys)
            return
        self._indexed = _joined([self._indexed, _index(self._recent_keys), keys])
        self._recent, self._recent_keys = {}, []

    def keys_at(self, positions: np.ndarray) -> pd.Index:
        """The keys at ``positions``, in their order."""
        indexed = len(self._indexed)
        if not self._recent_keys:
            return self._indexed[positions]
        older = positions < indexed
        recent = _index([self._recent_keys[at - indexed] for at in positions[~older].tolist()])
        keys = _joined([self._indexed[positions[older]], recent])
        # back into the order asked: older ones came first, then recent ones
        order = np.concatenate([np.flatnonzero(older), np.flatnonzero(~older)])
        return keys[np.argsort(order, kind="stable")]


def _index(keys: Iterable[Hashable]) -> pd.Index:
    """``keys`` as a flat Index (tuples of a compound key stay tuples, not levels)."""
    if isinstance(keys, pd.MultiIndex):
        return pd.Index(keys.tolist(), tupleize_cols=False)
    if isinstance(keys, pd.Index):
        return keys
    return pd.Index(list(keys), tupleize_cols=False)


def _joined(parts: list[pd.Index]) -> pd.Index:
    """``parts`` one after the other (empty ones left out: they would make ints objects)."""
    kept = [part for part in parts if len(part)] or parts[:1]
    return kept[0].append(kept[1:]) if len(kept) > 1 else kept[0]


def _room_for(array: np.ndarray, size: int) -> np.ndarray:
    """``array``, or a copy with room for ``size`` entries (doubling: O(1) per entry added)."""
    if size <= len(array):
        return array
    grown = np.zeros(max(size, 2 * len(array), 1024), array.dtype)
    grown[:len(array)] = array
    return grown
