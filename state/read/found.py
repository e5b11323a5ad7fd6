"""What a read of stored state found: per key asked, whether it holds a value, and the rows
of those that do (:class:`Found`), shared by the readers (:mod:`state.read.lookup`) and the
run's holders of state (:mod:`state.run.held`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..contract.codecs import encoded_integers


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
