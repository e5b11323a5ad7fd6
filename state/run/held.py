"""What an operator's state held in memory for a run offers, however it holds its values.

Two representations implement :class:`HeldValues`: :class:`~state.run.objects.ObjectValues` (a
Python object per key: any value the codec stores) and :class:`~state.run.columns.ColumnValues`
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
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from ..read.found import Found

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
