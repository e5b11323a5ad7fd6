"""Per-key calls on NumPy arrays: a batch split into each key's rows as ``{column: array}``, and
the functions' results gathered back into one frame.

A pandas DataFrame per key costs about a hundred microseconds to build and as much again for
each pandas operation on it, which is most of a per-key map's time when keys have a few rows
each. Here the batch is sorted by key once and every key gets views of the sorted columns;
NumPy operations on a handful of values take a microsecond or two.

>>> frame = pd.DataFrame({"k": ["a", "b", "a"], "x": [1, 2, 3]})
>>> blocks = KeyBlocks.of(frame, frame["k"])
>>> [(key, data["x"].tolist()) for key, data in blocks]
[('a', [1, 3]), ('b', [2])]
>>> results = [(rows, {"total": data["x"].cumsum()}) for (key, data), rows in zip(blocks, blocks.rows)]
>>> gathered(results, frame.index)["total"].tolist()
[1, 2, 4]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

Arrays = dict[str, np.ndarray]


class KeyBlocks:
    """A batch's rows grouped by key, in order of each key's first row; every key's rows keep
    their input order. Iterating gives ``(key, {column: array})``; ``rows[i]`` holds the input
    positions of the ``i``-th key's rows."""

    def __init__(self, keys: list, columns: Arrays, order: np.ndarray, bounds: np.ndarray):
        self.keys = keys
        self._columns = columns
        self._order = order
        self._bounds = bounds

    @classmethod
    def of(cls, frame: pd.DataFrame, keys: pd.Series) -> KeyBlocks:
        codes, uniques = pd.factorize(keys, sort=False)
        order = np.argsort(codes, kind="stable")  # key by key, input order within each
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(codes[order])) + 1, [len(order)]])
        columns = {str(name): frame[name].to_numpy()[order] for name in frame.columns}
        return cls(list(uniques), columns, order, bounds)

    def __iter__(self) -> Iterator[tuple[Any, Arrays]]:
        bounds = self._bounds
        for position, key in enumerate(self.keys):
            start, end = bounds[position], bounds[position + 1]
            yield key, {name: values[start:end] for name, values in self._columns.items()}

    @property
    def rows(self) -> list[np.ndarray]:
        bounds = self._bounds
        return [self._order[bounds[i]:bounds[i + 1]] for i in range(len(self.keys))]

    def empty(self) -> Arrays:
        """Every column with no rows (the data of a call for a timer)."""
        return {name: values[:0] for name, values in self._columns.items()}


def as_arrays(result: Any) -> Arrays | None:
    """A function's result as equal-length arrays by column: a mapping of array-likes, a
    DataFrame or None (no rows)."""
    if result is None:
        return None
    if isinstance(result, pd.DataFrame):
        return {str(name): result[name].to_numpy() for name in result.columns}
    if not isinstance(result, Mapping):
        raise TypeError(f"returned {type(result).__name__}; with data='arrays' return a dict of "
                        "equal-length arrays (column -> values), a DataFrame or None")
    arrays = {str(name): np.asarray(values) for name, values in result.items()}
    lengths = {name: len(values) if values.ndim else -1 for name, values in arrays.items()}
    if len(set(lengths.values())) > 1 or -1 in lengths.values():
        raise TypeError(f"returned columns of different lengths {lengths}; every column needs "
                        "one value per row")
    return arrays


def gathered(results: list[tuple[np.ndarray | None, Arrays | None]], index: pd.Index) -> pd.DataFrame:
    """One frame of per-key results ``(input positions, arrays)``: a key that returned a row per
    input row has them at those rows' places (``index`` is the input's); other results (fewer
    or more rows, or a timer's call, whose positions are ``None``) follow every input row, in
    call order."""
    kept = [(rows, arrays) for rows, arrays in results if arrays]
    if not kept:
        return pd.DataFrame(index=index[:0])
    names = list(kept[0][1])
    if any(list(arrays) != names for _, arrays in kept):
        # results of different columns: pandas aligns them (rare, and slower)
        frames = [pd.DataFrame(arrays, index=_places(rows, arrays, len(index))) for rows, arrays in kept]
        return _ordered(pd.concat(frames), index)
    places = np.concatenate([_places(rows, arrays, len(index)) for rows, arrays in kept])
    columns = {name: np.concatenate([arrays[name] for _, arrays in kept]) for name in names}
    frame = pd.DataFrame(columns, index=places)
    return _ordered(frame, index)


def _places(rows: np.ndarray | None, arrays: Arrays, inputs: int) -> np.ndarray:
    """Where a result's rows go: its input rows' positions when it has one per input row, else
    after every input row (ties keep call order in the stable sort)."""
    length = len(next(iter(arrays.values())))
    if rows is not None and len(rows) == length:
        return rows
    return np.full(length, inputs, dtype=np.int64)


def _ordered(frame: pd.DataFrame, index: pd.Index) -> pd.DataFrame:
    """Rows sorted by place: input rows take the input's index labels, the others (sorted last)
    number on after them."""
    frame = frame.sort_index(kind="stable")
    places = frame.index.to_numpy()
    inside = int((places < len(index)).sum())
    labels = index.take(places[:inside])
    if inside < len(frame):
        start = int(index.max()) + 1 if inside and pd.api.types.is_integer_dtype(index) else len(index)
        labels = labels.append(pd.RangeIndex(start, start + len(frame) - inside))
    frame.index = labels
    return frame
