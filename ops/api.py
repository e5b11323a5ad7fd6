"""The state API user functions call: ``get(op, md)`` and ``set(op, md, value)``, KX-shaped."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from state import OperatorState


@dataclass(frozen=True)
class Metadata:
    """What a stateful function knows about the data it is called with.

    ``key`` is the key of the rows (per-key mode), a pandas Index of the keys present
    (vectorized mode), or ``None`` for an unkeyed stream. ``batch_id`` is the micro-batch number;
    use it as the seed of any randomness, so a replayed batch gives the same result.
    """

    key: Hashable | pd.Index | None
    batch_id: int
    pipeline: str
    operator: str
    vectorized: bool = False

    @property
    def seed(self) -> int:
        return self.batch_id


class Op:
    """Handle to a running operator, passed as ``op`` to stateful functions."""

    def __init__(self, name: str, state: OperatorState, pipeline: str):
        self.name = name
        self.pipeline = pipeline
        self._state = state

    def __repr__(self) -> str:
        return f"Op({self.pipeline}.{self.name})"


def get(op: Op, md: Metadata) -> Any:
    """State of ``op`` for the key in ``md`` (or its unkeyed state); initial state when unset.

    In vectorized mode returns a pandas Series indexed by ``md.key``.
    """
    if md.vectorized:
        return op._state.get_many(_keys(md))
    return op._state.get(md.key)


def _keys(md: Metadata) -> pd.Index:
    if not isinstance(md.key, pd.Index):
        raise TypeError(f"operator {md.operator!r}: vectorized metadata carries a pandas Index of "
                        f"keys, got {type(md.key).__name__}")
    return md.key


def set(op: Op, md: Metadata, value: Any) -> Any:  # noqa: A001 - mirrors KX's .qsp.set
    """Replace the state of ``op`` for the key in ``md``; saved at the next checkpoint. Returns
    ``value``, as KX's ``.qsp.set`` returns the data it stored, so a function can end with
    ``return sp.set(op, md, new_rows)``.

    In vectorized mode ``value`` is a Series indexed by key (any subset of ``md.key``); a key
    that is not in the batch is an error, never a write under a key nobody asked for.

    >>> from state import StateStore
    >>> store = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    >>> op = Op("sum", store.operator("sum", 0), "p")
    >>> set(op, Metadata("a", 1, "p", "sum"), 5), get(op, Metadata("a", 1, "p", "sum"))
    (5, 5)
    """
    if md.vectorized:
        if not isinstance(value, pd.Series):
            raise TypeError(f"operator {op.name!r} is vectorized: set() takes a pandas Series "
                            f"indexed by key, got {type(value).__name__}")
        stray = value.index[~value.index.isin(_keys(md))]
        if len(stray):
            raise ValueError(f"pipeline {md.pipeline!r}, operator {op.name!r}, batch {md.batch_id}: "
                           f"set() was given {len(stray)} key(s) that are not in this batch, "
                           f"such as {stray[:3].tolist()}; index the Series by md.key (or a "
                           "subset of it)")
        op._state.set_many(value)
    else:
        op._state.set(md.key, value)
    return value
