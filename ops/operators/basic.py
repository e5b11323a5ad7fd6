"""The basic operators: ``map`` (a user function, optionally with managed state) and ``filter``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from state import Hooks

from ..api import Metadata, Op
from ..context import BatchScope
from ..errors import OperatorError
from .aggregates import to_python
from .base import Operator, StateDeclaration


class _Stateless:
    """Marks a map without managed state; one instance, also after pickling (executors)."""

    def __repr__(self) -> str:
        return "STATELESS"

    def __reduce__(self) -> str:
        return "STATELESS"


STATELESS = _Stateless()


@dataclass(frozen=True)
class Map(Operator):
    """``fn(data)`` or, with ``state``, ``fn(op, md, data)`` returning a DataFrame (or None).

    Per-key mode calls ``fn`` once per key of ``keys`` with that key's rows (KX semantics);
    vectorized mode calls it once with every row and ``md.key`` holding all the batch's keys.
    Without ``keys`` the state is the stream's one unkeyed value.
    """

    fn: Callable[..., Any]
    name: str
    state: Any = STATELESS
    vectorized: bool = False
    codec: str = "json"
    hooks: Hooks | None = None
    keys: tuple[str, ...] = ()

    @property
    def stateful(self) -> bool:
        return self.state is not STATELESS

    def declares(self) -> StateDeclaration:
        if not self.stateful:
            return StateDeclaration.stateless()
        if not self.keys:
            return StateDeclaration.unkeyed(self.name)
        return StateDeclaration.keyed(self.keys, self.name)

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        if not self.stateful:
            return self._call(scope, None, frame)
        op = Op(self.name, scope.store.operator(self.name, self.state, self.codec), scope.pipeline)
        if not self.keys:
            return self._call(scope, None, frame, op=op, md=self._md(scope, None, False))
        keys = _key_index(frame, self.keys, scope.where(self.name))
        op._state.prefetch(keys.unique())
        if self.vectorized:
            md = self._md(scope, pd.Index(keys.unique(), tupleize_cols=False), True)
            return self._call(scope, "<all keys>", frame, op=op, md=md)
        parts = [self._call(scope, key, rows, op=op, md=self._md(scope, key, False))
                 for key, rows in frame.groupby(keys, sort=False)]
        return _concat_in_order(parts, frame)

    def _md(self, scope: BatchScope, key: Any, vectorized: bool) -> Metadata:
        return Metadata(key=key, batch_id=scope.batch_id, pipeline=scope.pipeline,
                        operator=self.name, vectorized=vectorized)

    def _call(self, scope: BatchScope, key: Any, rows: pd.DataFrame, *, op: Op | None = None,
              md: Metadata | None = None) -> pd.DataFrame:
        try:
            result = self.fn(op, md, rows) if op is not None else self.fn(rows)
            return _as_frame(result)
        except Exception as exc:
            raise OperatorError(
                f"{scope.where(self.name, key)}: {type(exc).__name__}: {exc}. Nothing of this "
                "batch was committed; the next run retries it from the last checkpoint.") from exc


@dataclass(frozen=True)
class Filter(Operator):
    """Keeps the rows for which ``fn(data)`` returns True (a boolean Series or array)."""

    fn: Callable[[pd.DataFrame], Any]
    name: str

    def declares(self) -> StateDeclaration:
        return StateDeclaration.stateless()

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        try:
            mask = pd.Series(self.fn(frame), index=frame.index).astype(bool)
        except Exception as exc:
            raise OperatorError(f"{scope.where(self.name)}: {type(exc).__name__}: {exc}") from exc
        return frame[mask]


def _key_index(frame: pd.DataFrame, key_fields: tuple[str, ...], where: str) -> pd.Series:
    """The key of every row: the key field's value, or a tuple of the key fields' values;
    ``where`` names the pipeline, operator and batch in the error when one is missing."""
    missing = [name for name in key_fields if name not in frame.columns]
    if missing:
        raise OperatorError(f"{where}: key field(s) {missing} are not in the data reaching this "
                            f"operator (its columns: {list(frame.columns)}); an earlier map "
                            "dropped them")
    if len(key_fields) == 1:
        return frame[key_fields[0]].map(to_python)
    return pd.Series(list(zip(*(frame[name].map(to_python) for name in key_fields))),
                     index=frame.index, dtype=object)


def _as_frame(result: Any) -> pd.DataFrame:
    if result is None:
        return pd.DataFrame()
    if isinstance(result, pd.Series):
        return result.to_frame()
    if isinstance(result, pd.DataFrame):
        return result
    raise TypeError(f"returned {type(result).__name__}; return a pandas DataFrame, Series or None")


def _concat_in_order(parts: list[pd.DataFrame], original: pd.DataFrame) -> pd.DataFrame:
    """Per-key outputs back in the input's row order (functions keep the index of their rows)."""
    parts = [part for part in parts if len(part.columns)]
    if not parts:
        return original.iloc[0:0]
    return pd.concat(parts).sort_index(kind="stable")
