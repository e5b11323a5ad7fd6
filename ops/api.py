"""The state API user functions call, KX-shaped: ``get(op, md)``, ``set(op, md, value)``,
``remove(op, md)`` (Spark's ``state.remove()``: the key holds nothing again), and timers
(``set_timer`` / ``clear_timer``).

``op`` is the handle a stateful function is called with, or its operator's name, or ``None``
for the pipeline's global storage. ``md`` is the :class:`Metadata` the function was called
with (its key's state), ``None`` (KX's generic null: the operator's unkeyed state) or a mapping
with a ``"key"`` (a named entry, as KX's ``` ``key!(::;`k1) ```).

What a function reads back is what a restart reads: ``set`` stores the value as its codec
round-trips it (JSON: tuples become lists, dict keys strings) and returns that, and ``get``
hands out a copy, so changing a value in place without ``set`` changes nothing, in this run
or the next.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, SupportsInt, cast

import numpy as np
import pandas as pd

from state import OperatorState, Timers

from .errors import OperatorError


@dataclass(frozen=True)
class Metadata:
    """What a stateful function knows about the data it is called with.

    ``key`` is the key of the rows (per-key mode), a pandas Index of the keys present
    (vectorized mode), or ``None`` for an unkeyed stream. ``batch_id`` is the micro-batch number;
    use it as the seed of any randomness, so a replayed batch gives the same result.
    ``batch_time`` is the batch's processing time (epoch ms, the same on a replay). ``timer``
    says which timer fired: its deadline (epoch ms) when the call is for a due timer (per-key
    mode: the rows are empty), else ``None``; vectorized, a Series of deadlines indexed by the
    keys whose timers fired (those keys are in ``md.key`` too). ``watermark`` is the operator's
    watermark at the batch's start (epoch ms: the largest event time of the batches before, less
    its ``delay``; Spark's ``getCurrentWatermarkMs``) for a map with an ``event_time`` column,
    ``None`` before its first event and for a map without one.
    """

    key: Hashable | pd.Index | None
    batch_id: int
    pipeline: str
    operator: str
    vectorized: bool = False
    batch_time: int = 0
    timer: Any = None
    watermark: int | None = None

    @property
    def seed(self) -> int:
        return self.batch_id


class Op:
    """Handle to a running operator, passed as ``op`` to stateful functions."""

    def __init__(self, name: str, state: OperatorState, pipeline: str,
                 timers: Timers | None = None, event_time: bool = False, batch_time: int = 0,
                 watermark: int | None = None):
        self.name = name
        self.pipeline = pipeline
        self._state = state
        self._timers = timers
        self._event_time = event_time
        self._batch_time = batch_time
        self._watermark = watermark  # event time: the watermark the batch started with

    def __repr__(self) -> str:
        return f"Op({self.pipeline}.{self.name})"


@dataclass(frozen=True)
class Running:
    """What a function running now can reach besides its handle: the global storage of its
    pipeline (``None`` where there is none: on an executor), whether it runs in a task holding
    only some keys' state (``some_keys``: a keyed operator in distributed mode) and, for
    errors, the pipeline's stateful operators."""

    op: Op
    global_state: OperatorState | None
    operators: tuple[str, ...]
    some_keys: bool = False


_running: ContextVar[Running | None] = ContextVar("lakestream_running", default=None)


@contextmanager
def running(now: Running) -> Iterator[None]:
    """Make ``now`` what ``get``/``set`` resolve names and global storage against (the runtime
    wraps each call of a stateful function in it)."""
    token = _running.set(now)
    try:
        yield
    finally:
        _running.reset(token)


def get(op: Op | str | None, md: Metadata | Mapping[str, Any] | None = None) -> Any:
    """State of ``op`` for the key in ``md`` (or its unkeyed state); initial state when unset.
    In vectorized mode returns a pandas Series indexed by ``md.key``.

    >>> from state import StateStore
    >>> store = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    >>> op = Op("sum", store.operator("sum", 0), "p")
    >>> get(op, Metadata("a", 1, "p", "sum")), get(op, None)
    (0, 0)
    """
    state = _state_of(op, md)
    if isinstance(md, Metadata) and md.vectorized:
        values = state.get_many(_keys(md))
        return values if values.dtype != object else values.map(state.detached)
    return state.detached(state.get(_key_of(md)))


def set(op: Op | str | None, md: Metadata | Mapping[str, Any] | None, value: Any) -> Any:  # noqa: A001 - mirrors KX's .qsp.set
    """Replace the state of ``op`` for the key in ``md``; saved at the next checkpoint. Returns
    the value as stored (and as ``get`` reads it back, now or after a restart), as KX's
    ``.qsp.set`` returns the data it stored, so a function can end with
    ``return sp.set(op, md, new_rows)``.

    In vectorized mode ``value`` is a Series indexed by key (any subset of ``md.key``); a key
    that is not in the batch is an error, never a write under a key nobody asked for.

    >>> from state import StateStore
    >>> store = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    >>> op = Op("sum", store.operator("sum", 0), "p")
    >>> set(op, Metadata("a", 1, "p", "sum"), (5, 6)), get(op, Metadata("a", 1, "p", "sum"))
    ([5, 6], [5, 6])
    """
    state = _state_of(op, md)
    if isinstance(md, Metadata) and md.vectorized:
        value = _within_batch(md, value, "set()")
        stored = value if value.dtype != object else pd.Series(
            [state.normalized(key, item) for key, item in value.items()], index=value.index,
            dtype=object)
        state.set_many(stored)
        return stored
    key = _key_of(md)
    stored = state.normalized(key, value)
    state.set(key, stored)
    return stored


def remove(op: Op | str | None, md: Metadata | Mapping[str, Any] | None, keys: Any = None) -> None:
    """Delete the state of ``op`` for the key in ``md`` (Spark's ``state.remove()``): the key
    holds no value any more, ``get`` reads the initial state again, and the next checkpoint
    writes a tombstone, so ``read_state`` no longer lists the key (``set(op, md, None)`` stores
    ``None`` as a value instead). The key's timer is not touched (``clear_timer`` removes it).

    Vectorized, ``keys`` (any of ``md.key``: a list, an Index, a Series' index) are removed,
    every key of ``md.key`` when omitted; a key not in the batch is an error.

    >>> from state import StateStore
    >>> store = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    >>> op, md = Op("sum", store.operator("sum", 0), "p"), Metadata("a", 1, "p", "sum")
    >>> _ = set(op, md, 5); remove(op, md); get(op, md), store.operator("sum").held_keys()
    (0, [])
    """
    state = _state_of(op, md)
    if isinstance(md, Metadata) and md.vectorized:
        chosen = _keys(md) if keys is None else pd.Index(list(keys), tupleize_cols=False)
        _within_batch(md, pd.Series(0, index=chosen), "remove()")
        state.delete_many(chosen.tolist())
    elif keys is not None:
        raise TypeError("remove(op, md, keys) takes keys in vectorized mode only; per key, md "
                        "names the key")
    else:
        state.delete(_key_of(md))


def set_timer(op: Op | str, md: Metadata, at: Any = None, *, after: Any = None) -> None:
    """Give ``md``'s key a timer (replacing the one it had): the operator's function is called
    for the key when it falls due, in a batch after the one setting it, even one with no data
    for the key (``md.timer`` then holds the deadline). ``at`` is the deadline: epoch ms (an int
    or a float, NumPy's too), or a timestamp (``pd.Timestamp``, ``datetime``, ``np.datetime64``
    or an ISO string; naive ones are UTC); ``after`` a duration from the batch's time (processing
    time only): a string with a unit (``"30s"``), a ``timedelta`` or a number of milliseconds.
    Anything else is refused, naming the operator and the value.
    Timers are processing time, or event time when the operator has an ``event_time`` column.
    Vectorized, ``at`` may be a Series indexed by some of ``md.key``.

    >>> from state import StateStore
    >>> store = StateStore.of_rows(pd.DataFrame({"operator": [], "key": [], "value": []}))
    >>> op = Op("s", store.operator("s", 0), "p", store.timers("s"), batch_time=1_000)
    >>> set_timer(op, Metadata("a", 1, "p", "s"), after="2s"); store.timers("s").get("a")
    3000
    """
    handle = _handle(op)
    timers = _timers_of(handle)
    if (at is None) == (after is None):
        raise ValueError(f"operator {handle.name!r}: set_timer takes at= or after=, one of them")
    if after is not None:
        if handle._event_time:
            raise ValueError(f"operator {handle.name!r} keeps event-time timers: give at= (an "
                             "event time), not after=")
        at = handle._batch_time + _duration_ms(after, handle.name)
    if md.vectorized and isinstance(at, pd.Series):
        for key, deadline in _within_batch(md, at, "set_timer()").items():
            timers.set(key, _epoch_ms(deadline, handle.name))
    elif md.vectorized:
        deadline = _epoch_ms(at, handle.name)
        for key in _keys(md):
            timers.set(key, deadline)
    else:
        timers.set(md.key, _epoch_ms(at, handle.name))


def clear_timer(op: Op | str, md: Metadata) -> None:
    """Remove the timer of ``md``'s key (of every key in ``md.key``, vectorized)."""
    timers = _timers_of(_handle(op))
    timers.clear_many(list(_keys(md)) if md.vectorized else [md.key])


def _handle(op: Op | str | None) -> Op:
    if isinstance(op, Op):
        return op
    now = _running.get()
    if now is None:
        raise OperatorError(f"operator {op!r} named outside a running stateful function: pass "
                            "the op handle the function was called with")
    if op is not None and op != now.op.name:
        raise OperatorError(
            f"pipeline {now.op.pipeline!r}: no operator named {op!r} here; a function reads "
            f"and writes the state of the operator it runs in ({now.op.name!r}) or global "
            f"storage (op=None). Stateful operators of the pipeline: {list(now.operators)}")
    return now.op


def _state_of(op: Op | str | None, md: Any) -> OperatorState:
    if op is not None:
        handle = _handle(op)
        now = _running.get()
        if not isinstance(md, Metadata) and now is not None and now.some_keys:
            raise OperatorError(
                f"pipeline {handle.pipeline!r}, operator {handle.name!r}: md={md!r} names state "
                "outside the key the function was called for, and this keyed operator runs "
                "on executors (distributed mode), each task holding only its keys' state; "
                "pass md, use global storage in driver mode, or run in driver mode")
        return handle._state
    now = _running.get()
    if now is None:
        raise OperatorError("global storage (op=None) is reachable only from a running "
                            "stateful function")
    if now.global_state is None:
        raise OperatorError(
            f"pipeline {now.op.pipeline!r}, operator {now.op.name!r}: global storage lives on "
            "the driver, and this function runs on an executor (distributed mode); run the "
            "pipeline in driver mode (.with_mode('driver')) or keep the value in the "
            "operator's own state")
    return now.global_state


def _timers_of(op: Op) -> Timers:
    if op._timers is None:
        raise OperatorError(f"operator {op.name!r} has no timers: build it with "
                            ".map(fn, state=…, timers=True)")
    return op._timers


def _key_of(md: Metadata | Mapping[str, Any] | None) -> Hashable:
    if md is None:
        return None
    if isinstance(md, Metadata):
        return md.key
    if isinstance(md, Mapping) and "key" in md:
        return md["key"]
    raise TypeError(f"md is the metadata the function was called with, None (unkeyed state) "
                    f"or a mapping with a 'key'; got {type(md).__name__}")


def _keys(md: Metadata) -> pd.Index:
    if not isinstance(md.key, pd.Index):
        raise TypeError(f"operator {md.operator!r}: vectorized metadata carries a pandas Index of "
                        f"keys, got {type(md.key).__name__}")
    return md.key


def _within_batch(md: Metadata, value: Any, call: str) -> pd.Series:
    """``value``, a Series indexed by keys of the batch; else an error naming some strays."""
    if not isinstance(value, pd.Series):
        raise TypeError(f"operator {md.operator!r} is vectorized: {call} takes a pandas Series "
                        f"indexed by key, got {type(value).__name__}")
    stray = value.index[~value.index.isin(_keys(md))]
    if len(stray):
        raise ValueError(f"pipeline {md.pipeline!r}, operator {md.operator!r}, batch {md.batch_id}: "
                         f"{call} was given {len(stray)} key(s) that are not in this batch, "
                         f"such as {stray[:3].tolist()}; index the Series by md.key (or a "
                         "subset of it)")
    return value


def _epoch_ms(at: Any, operator: str) -> int:
    """A deadline as epoch ms: a number is taken as ms (a float too: ``20000.0`` is 20 s after
    the epoch, not its start); a timestamp (naive ones are UTC). Else a ``TypeError`` naming
    ``operator`` and the value."""
    if isinstance(at, numbers.Real) and not isinstance(at, (bool, np.bool_, np.timedelta64)):
        return _finite_ms(at, operator, "at", "a deadline must be a finite number of epoch ms")
    if isinstance(at, (pd.Timestamp, date, np.datetime64)) or (
            isinstance(at, str) and not _numeric_text(at)):
        try:
            stamp = pd.Timestamp(at)
        except ValueError as exc:
            raise ValueError(f"operator {operator!r}: set_timer(at={at!r}) is not a timestamp "
                             f"pandas reads ({exc}); give epoch ms or a timestamp") from None
        if stamp is pd.NaT:
            raise ValueError(f"operator {operator!r}: set_timer(at={at!r}): the deadline is "
                             "missing (NaT); give epoch ms or a timestamp")
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
        return int(stamp.value // 1_000_000)
    raise TypeError(f"operator {operator!r}: set_timer(at={at!r}) takes epoch ms (an int or a "
                    f"float) or a timestamp, not {type(at).__name__}")


def _duration_ms(duration: Any, operator: str) -> int:
    """A duration in ms: a number is ms (pandas would read an int as nanoseconds), a string
    needs its unit (``"30s"``), a ``timedelta`` (or NumPy's) as it is. Negative ones, and
    anything else, are refused naming ``operator`` and the value."""
    if isinstance(duration, (timedelta, np.timedelta64)):  # before numbers: NumPy's is an int
        ms = int(pd.Timedelta(duration) / pd.Timedelta(milliseconds=1))
    elif isinstance(duration, numbers.Real) and not isinstance(duration, (bool, np.bool_)):
        ms = _finite_ms(duration, operator, "after", "a duration must be a finite number of ms")
    elif isinstance(duration, str) and not _numeric_text(duration):
        try:
            ms = int(pd.Timedelta(duration) / pd.Timedelta(milliseconds=1))
        except ValueError as exc:
            raise ValueError(f"operator {operator!r}: set_timer(after={duration!r}) is not a "
                             f"duration ({exc}); write it as '30s', '10min', '1h'") from None
    else:
        kind = "a string without a unit" if isinstance(duration, str) else type(duration).__name__
        raise TypeError(f"operator {operator!r}: set_timer(after={duration!r}) takes a duration: "
                        f"a string with a unit ('30s'), a timedelta or a number of ms, not {kind}")
    if ms < 0:
        raise ValueError(f"operator {operator!r}: set_timer(after={duration!r}) is negative; "
                         "a timer falls due after the batch's time")
    return ms


def _finite_ms(number: Any, operator: str, argument: str, rule: str) -> int:
    """``number`` (of ms) as an int; a NaN or an infinity is refused with ``rule``, naming
    ``operator`` and the argument."""
    if not math.isfinite(number):
        raise ValueError(f"operator {operator!r}: set_timer({argument}={number!r}): {rule}")
    return int(cast(SupportsInt, number))


def _numeric_text(text: str) -> bool:
    """Whether ``text`` is a bare number, whose unit pandas would guess (ns)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
