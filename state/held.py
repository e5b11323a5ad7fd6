"""What an operator's state held in memory for a run offers, however it holds its values.

Two representations implement :class:`HeldValues`: :class:`~state.objects.ObjectValues` (a
Python object per key: any value the codec stores) and :class:`~state.columns.ColumnValues`
(numbers in arrays, for vectorized operators). Both keep the changes a run made since its last
checkpoint as encoded frames (:func:`change_frame`), merged into the rows the checkpoint writes
by :func:`checkpoint_rows`.

>>> first = change_frame("sum", ["1", "2"], ["5", "7"], np.array([0, 0], np.int8))
>>> later = change_frame("sum", ["2", "3"], [None, None], np.array([1, DROPPED], np.int8))
>>> checkpoint_rows([first, later]).to_dict("list")
{'operator': ['sum', 'sum'], 'key': ['1', '2'], 'value': ['5', None], 'deleted': [False, True]}
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .codecs import encoded_integers

#: ``(operator, encoded keys)`` -> the stored ``key, value`` (encoded) of those keys that hold
#: a value, in the keys' order; every key's, for ``None`` (:class:`Found`).
Loader = Callable[[str, pa.Array | None], "Found"]

#: an encoded change's ``deleted``: 0 a value, 1 a tombstone, DROPPED no row at all (the key
#: was set and deleted again before any checkpoint held it)
DROPPED = 2

_ROWS = ["operator", "key", "value", "deleted"]


class ValuesNeedObjects(Exception):
    """A value set or stored is not of a column-held state's type: hold the state as objects."""


class HeldValues(Protocol):
    """The values of one operator's keys during a run, and its changes since the last
    checkpoint. Values are read from ``_state`` the first time a key is seen in the run."""

    name: str

    def prefetch(self, keys: Iterable[Hashable]) -> None:
        """Read the stored values of ``keys`` not yet seen in this run, in one read."""
        ...

    def get_many(self, index: pd.Index) -> pd.Series:
        """The value of each key of ``index`` (its initial state when it has none)."""
        ...

    def get_values(self, keys: Sequence[Hashable]) -> list[Any]:
        """:meth:`get_many` as a list in the order of ``keys``."""
        ...

    def set_many(self, values: pd.Series) -> None:
        """Replace the value of every key of the Series' index."""
        ...

    def set_values(self, keys: Iterable[Hashable], values: Iterable[Any]) -> None:
        """Replace the value of each key by the value at the same position."""
        ...

    def delete_many(self, keys: Iterable[Hashable]) -> None:
        """Forget every key in ``keys``: a tombstone is written unless nothing was stored."""
        ...

    def encode_changes(self) -> None:
        """Encode the values changed since the last call (raising what cannot be stored)."""
        ...

    def changed_rows(self) -> pd.DataFrame:
        """The ``operator, key, value, deleted`` rows the next checkpoint writes."""
        ...

    def mark_checkpointed(self) -> None:
        """The changes are written: count them anew."""
        ...

    @property
    def changed_keys(self) -> int:
        """How many keys changed since the last checkpoint."""
        ...

    @property
    def keys_held(self) -> int:
        """How many keys hold a value in memory now: set in this run, or read and stored (a run
        reads only the keys its batches touch, so this is not every stored key)."""
        ...


@dataclass(frozen=True)
class Found:
    """What a :data:`Loader` found of the keys it was asked for: per key asked, whether it
    holds a value (``holding``), and the stored rows of those that do, in the keys' order.
    Asked for every key (``None``): each stored key's row, every one holding.

    >>> found = Found.placed(pa.array(["a", "c", "b"]), pa.table({"key": ["b", "a"], "value": ["2", "1"]}))
    >>> found.holding.tolist(), found.rows["value"].to_pylist()
    ([True, False, True], ['1', '2'])
    """

    holding: np.ndarray
    rows: pa.Table

    @classmethod
    def every(cls, rows: pa.Table) -> Found:
        """Every one of ``rows`` (one per key), as asked for every key."""
        return cls(np.ones(rows.num_rows, bool), rows)

    @classmethod
    def placed(cls, keys: pa.Array | None, rows: pa.Table, key_column: str = "key") -> Found:
        """The stored ``rows`` of ``keys`` (a key at most once, in any order), put in the keys'
        order: for a loader whose rows come in no order (Spark's reads, rows handed in); the
        lookup of ``_state``'s files places them as it picks them, matching each key once."""
        if keys is None:
            return cls.every(rows)
        positions = key_positions(keys, rows[key_column])
        holding = positions >= 0
        return cls(holding, rows.take(pa.array(positions[holding], pa.int64())))


def key_positions(wanted: pa.Array | pa.ChunkedArray,
                  among: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The position in ``among`` (distinct keys, of ``wanted``'s type) of each of ``wanted``;
    -1 where it is not there. Integers, and the text of integers (encoded keys), are matched
    as int64s through pandas' hash index, several times faster than Arrow's.

    >>> key_positions(pa.array(["7", "-2", "9"]), pa.array(["9", "7"])).tolist()
    [1, -1, 0]
    >>> key_positions(pa.array(["a", None]), pa.array(["b", "a"])).tolist()
    [1, -1]
    """
    asked = _integers(wanted)
    held = None if asked is None else _integers(among)
    if held is not None and (index := pd.Index(held)).is_unique:
        return index.get_indexer(asked).astype(np.int64, copy=False)
    values = among.combine_chunks() if isinstance(among, pa.ChunkedArray) else among
    found = pc.index_in(wanted, value_set=values)
    return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), np.int64)


def _integers(keys: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """``keys`` as int64s, when they are signed integers or every one an int's text, none null."""
    if pa.types.is_signed_integer(keys.type):
        return None if keys.null_count else np.asarray(keys.to_numpy(), np.int64)
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        return encoded_integers(keys)
    return None


def change_frame(operator: str, keys: Sequence[str] | pa.Array,
                 values: Sequence[str | None] | np.ndarray, deleted: np.ndarray) -> pd.DataFrame:
    """One :meth:`HeldValues.encode_changes`' rows: encoded ``keys`` and ``values``, and
    ``deleted`` (int8: 0, 1 or :data:`DROPPED`) at the same positions."""
    if isinstance(keys, pa.Array):
        keys = keys.to_numpy(zero_copy_only=False)
    return pd.DataFrame({"operator": operator, "key": keys,
                         "value": pd.array(values, dtype=object), "deleted": deleted})


def checkpoint_rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows a checkpoint writes from the change frames of the batches since the last one:
    a key's last change (a later frame's row wins), none for a :data:`DROPPED` one."""
    if not frames:
        return pd.DataFrame(columns=_ROWS)
    rows = frames[0]
    if len(frames) > 1:  # the same key changed by several batches: its last change
        rows = pd.concat(frames, ignore_index=True).drop_duplicates("key", keep="last")
    rows = rows[rows["deleted"] != DROPPED] if (rows["deleted"] == DROPPED).any() else rows
    return rows.astype({"deleted": bool}).reset_index(drop=True)
