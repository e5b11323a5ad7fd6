"""The basic operators: ``map`` (a user function, optionally with managed state) and ``filter``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from state import EncodingError, Hooks, StateType, infer_state_type

from ..api import Metadata, Op, Running, running
from ..context import BatchScope
from ..errors import OperatorError, PipelineDefinitionError
from .aggregates import to_python
from .arrays import KeyBlocks, as_arrays, gathered
from .base import InferredState, Operator, StateDeclaration, TimerDeclaration
from .timing import KeyClock


class _Stateless:
    """Marks a map without managed state; one instance, also after pickling (executors)."""

    def __repr__(self) -> str:
        return "STATELESS"

    def __reduce__(self) -> str:
        return "STATELESS"


STATELESS = _Stateless()


GLOBAL_STATE = "__global__"  # the state name of a pipeline's global storage (sp.get(None, md))


@dataclass(frozen=True)
class Map(Operator):
    """``fn(data)`` or, with ``state``, ``fn(op, md, data)`` returning a DataFrame (or None).

    Per-key mode calls ``fn`` once per key of ``keys`` with that key's rows (KX semantics), as
    a DataFrame or, with ``data="arrays"``, as ``{column: NumPy array}`` (see
    :mod:`ops.operators.arrays`); vectorized mode calls it once with every row and ``md.key``
    holding all the batch's keys.
    Without ``keys`` the state is the stream's one unkeyed value. ``clock`` (keyed maps only)
    gives it timers and state TTL (see :mod:`ops.operators.timing`).
    """

    fn: Callable[..., Any]
    name: str
    state: Any = STATELESS
    vectorized: bool = False
    codec: str = "json"
    hooks: Hooks | None = None
    keys: tuple[str, ...] = ()
    clock: TimerDeclaration | None = None
    timers: bool = False  # sp.set_timer allowed (else the clock serves TTL only)
    data: str = "frame"  # what a per-key call gets: "frame" (a DataFrame) or "arrays"
    #: rows at or below the watermark never reach ``fn`` (Spark's rule; event time only)
    drop_late: bool = False
    #: stored in typed columns of this type (``state_type=``), not as JSON text
    state_type: StateType | None = None
    #: without ``state_type``, whether its state may be typed as ``state`` is (False:
    #: ``state_type="json"`` said no; see :meth:`inferable_state_types`)
    infer_state_type: bool = True

    def __post_init__(self) -> None:
        if self.data not in ("frame", "arrays"):
            raise PipelineDefinitionError(
                f"map {self.name!r}: data must be 'frame' or 'arrays', not {self.data!r}")
        if self.data == "arrays" and (self.vectorized or not (self.stateful and self.keys)):
            raise PipelineDefinitionError(
                f"map {self.name!r}: data='arrays' is for per-key calls: it needs state (state=…), "
                "a keyed stream (key= on the reader) and vectorized=False")
        if self.clock is not None and not (self.stateful and self.keys):
            raise PipelineDefinitionError(
                f"map {self.name!r}: timers and ttl need state (state=…) and a keyed stream "
                "(key= on the reader): a timer or a TTL belongs to a key")
        if self.state_type is not None:
            self._check_state_type(self.state_type)

    def _check_state_type(self, declared: StateType) -> None:
        if not (self.stateful and self.keys) or self.codec != "json":
            raise PipelineDefinitionError(
                f"map {self.name!r}: state_type= is for keyed state (state=… on a stream with "
                "key= on the reader) stored with the json codec; an unkeyed state is one row")
        if not _typed_name(self.name):
            raise PipelineDefinitionError(
                f"map {self.name!r}: a typed state's name names its columns (k__<name>, "
                "v__<name>__<field>): letters and digits, words joined by single underscores")
        if declared.first_misfit([self.state]) is not None:
            raise PipelineDefinitionError(
                f"map {self.name!r}: the initial state {self.state!r} is not of its "
                f"state_type {declared.describe()!r}")

    @property
    def stateful(self) -> bool:
        return self.state is not STATELESS

    def declares(self) -> StateDeclaration:
        if not self.stateful:
            return StateDeclaration.stateless()
        if not self.keys:
            return StateDeclaration.unkeyed(self.name)
        declared = StateDeclaration.keyed(self.keys, self.name)
        if self.clock is None:
            return declared
        return replace(declared, names=declared.names + self.clock.names, clock=self.clock)

    def state_shape(self) -> dict[str, Any]:
        """The type of the initial value (and a dict's fields): what a stored value is read as.

        >>> Map(fn=len, name="n", state={"n": 0, "sum": 0.0}).state_shape()
        {'value': 'dict with n, sum'}
        """
        initial = self.state
        if isinstance(initial, dict):
            return {"value": "dict with " + ", ".join(sorted(map(str, initial)))}
        return {"value": type(initial).__name__}

    def state_types(self) -> dict[str, StateType]:
        return {} if self.state_type is None else {self.name: self.state_type}

    def inferable_state_types(self) -> dict[str, InferredState]:
        """Without ``state_type=`` (and not ``"json"``), a keyed state's storage is the run's
        to settle, with the type of ``state``'s value (:func:`state.contract.types.infer`) where typed
        storage could hold it: the json codec, no timers or TTL (typed state with them runs in
        driver mode only), a name that can name columns; else ``None`` (text).

        >>> Map(fn=len, name="sum", state=0, keys=("k",)).inferable_state_types()["sum"].kind.describe()
        'int64'
        >>> Map(fn=len, name="sum", state=None, keys=("k",)).inferable_state_types()["sum"].kind is None
        True
        """
        if self.state_type is not None or not self.infer_state_type or not (self.stateful
                                                                          and self.keys):
            return {}
        origin = f"state={self.state!r}"
        if self.codec != "json" or self.clock is not None or not _typed_name(self.name):
            return {self.name: InferredState(None, origin)}
        return {self.name: InferredState(infer_state_type(self.state), origin)}

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        if not self.stateful:
            return self._call(scope, None, frame)
        clock = KeyClock(self.clock, scope) if self.clock is not None else None
        if clock is not None and self.drop_late:
            frame = clock.on_time(frame)
        # a vectorized keyed map gets and sets whole Series: numbers are then held as columns
        # stored typed when the run's store says so (declared, or inferred: ops.runtime.storage)
        held = scope.store.operator(self.name, self.state, self.codec,
                                    columns=self.vectorized and bool(self.keys))
        event_time = bool(self.clock and self.clock.event_time)
        op = Op(self.name, held, scope.pipeline,
                clock.timers if clock is not None and self.timers else None,
                event_time=event_time, batch_time=scope.batch_time,
                watermark=clock.now if clock is not None and event_time else None)
        shared = None if scope.store.handed_in else scope.store.operator(GLOBAL_STATE)
        now = Running(op, shared, scope.operators, some_keys=bool(self.keys) and shared is None)
        if not self.keys:
            return self._call(scope, None, frame, op=op, md=self._md(scope, op, None), now=now)
        keys = self._keys(scope, frame)
        present = pd.Index(keys.unique(), tupleize_cols=False)
        op._state.prefetch(present)
        fired: list[tuple[Any, int]] = []
        if clock is not None:
            clock.expire(op._state)
            fired = clock.fire(present.tolist())
        if self.vectorized:
            out = self._vectorized(scope, frame, present, fired, op, now)
        elif self.data == "arrays":
            out = self._per_key_arrays(scope, frame, keys, fired, op, now)
        else:
            out = self._per_key(scope, frame, keys, fired, op, now)
        if clock is not None:
            clock.renew(frame, keys)
        return out

    def _keys(self, scope: BatchScope, frame: pd.DataFrame) -> pd.Series:
        if frame.empty and not set(self.keys) <= set(frame.columns):  # a batch with no input
            return pd.Series([], dtype=object)
        return _key_index(frame, self.keys, scope.where(self.name))

    def _per_key(self, scope: BatchScope, frame: pd.DataFrame, keys: pd.Series,
                 fired: list[tuple[Any, int]], op: Op, now: Running) -> pd.DataFrame:
        parts = [self._call(scope, key, rows, op=op, md=self._md(scope, op, key), now=now)
                 for key, rows in frame.groupby(keys, sort=False)] if len(frame) else []
        ordered = _concat_in_order(parts, frame)
        timed = [self._call(scope, key, frame.iloc[0:0], op=op,
                            md=self._md(scope, op, key, timer=at), now=now) for key, at in fired]
        return _after(ordered, timed)

    def _per_key_arrays(self, scope: BatchScope, frame: pd.DataFrame, keys: pd.Series,
                        fired: list[tuple[Any, int]], op: Op, now: Running) -> pd.DataFrame:
        blocks = KeyBlocks.of(frame, keys)
        results: list[tuple[Any, Any]] = [
            (rows, self._call(scope, key, data, op=op, md=self._md(scope, op, key), now=now,
                              result=as_arrays))
            for (key, data), rows in zip(blocks, blocks.rows)]
        results += [(None, self._call(scope, key, blocks.empty(), op=op, now=now, result=as_arrays,
                                      md=self._md(scope, op, key, timer=at)))
                    for key, at in fired]
        return gathered(results, frame.index)

    def _vectorized(self, scope: BatchScope, frame: pd.DataFrame, present: pd.Index,
                    fired: list[tuple[Any, int]], op: Op, now: Running) -> pd.DataFrame:
        index = present.append(pd.Index([key for key, _ in fired], tupleize_cols=False)) if fired \
            else present
        timers = pd.Series([at for _, at in fired], index=index[len(present):], dtype="int64")
        md = replace(self._md(scope, op, index, timer=timers), vectorized=True)
        return self._call(scope, "<all keys>", frame, op=op, md=md, now=now)

    def _md(self, scope: BatchScope, op: Op, key: Any, timer: Any = None) -> Metadata:
        return Metadata(key=key, batch_id=scope.batch_id, pipeline=scope.pipeline,
                        operator=self.name, batch_time=scope.batch_time, timer=timer,
                        watermark=op._watermark)

    def _call(self, scope: BatchScope, key: Any, rows: Any, *, op: Op | None = None,
              md: Metadata | None = None, now: Running | None = None,
              result: Callable[[Any], Any] | None = None) -> Any:
        """``fn`` on ``rows``, its return value through ``result`` (a DataFrame by default); an
        error names the pipeline, operator, batch and key."""
        convert = result or _as_frame
        try:
            if op is None:
                return convert(self.fn(rows))
            assert now is not None
            with running(now):
                return convert(self.fn(op, md, rows))
        except EncodingError as exc:  # keeps its type: a value set cannot be stored
            raise EncodingError(f"{scope.where(self.name, key)}: {exc}. {_RETRIED}") from exc
        except Exception as exc:
            raise OperatorError(
                f"{scope.where(self.name, key)}: {type(exc).__name__}: {exc}. {_RETRIED}") from exc


def _typed_name(name: str) -> bool:
    """Whether ``name`` can name a typed state's columns (``k__<name>``, ``v__<name>__<field>``)."""
    return re.fullmatch(r"[A-Za-z0-9]+(_[A-Za-z0-9]+)*", name) is not None


_RETRIED = "Nothing of this batch was committed; the next run retries it from the last checkpoint."


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
        return _python_keys(frame[key_fields[0]])
    return pd.Series(list(zip(*(_python_keys(frame[name]) for name in key_fields))),
                     index=frame.index, dtype=object)


#: dtypes whose values already are what ``to_python`` makes of them (iterating and ``unique``
#: give Python scalars): a call per row there changed nothing and took a quarter of a second
#: per million rows
_PLAIN_KEY_DTYPES = frozenset(map(np.dtype, ("int64", "float64", "bool", "datetime64[ns]")))


def _python_keys(column: pd.Series) -> pd.Series:
    """``column`` with each value as ``to_python`` makes it: numpy scalars as Python ones,
    pandas' ``NA`` as ``None``."""
    return column if column.dtype in _PLAIN_KEY_DTYPES else column.map(to_python)


def _as_frame(result: Any) -> pd.DataFrame:
    if result is None:
        return pd.DataFrame()
    if isinstance(result, pd.Series):
        return result.to_frame()
    if isinstance(result, pd.DataFrame):
        return result
    raise TypeError(f"returned {type(result).__name__}; return a pandas DataFrame, Series or None")


def _after(ordered: pd.DataFrame, timed: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of timer calls after those of data calls, numbered after every input row."""
    timed = [part for part in timed if len(part.columns)]
    if not timed:
        return ordered
    start = int(ordered.index.max()) + 1 if len(ordered) else 0
    rows = pd.concat(timed, ignore_index=True)
    rows.index = pd.RangeIndex(start, start + len(rows))
    return pd.concat([ordered, rows]) if len(ordered) else rows


def _concat_in_order(parts: list[pd.DataFrame], original: pd.DataFrame) -> pd.DataFrame:
    """Per-key outputs back in the input's row order (functions keep the index of their rows)."""
    parts = [part for part in parts if len(part.columns)]
    if not parts:
        return original.iloc[0:0]
    return pd.concat(parts).sort_index(kind="stable")
