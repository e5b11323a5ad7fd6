"""Event-time windows over a keyed aggregation: tumbling and hopping, with a grace period.

Semantics (Kafka Streams / ksqlDB): windows are ``[start, end)`` aligned to the epoch. Stream
time is the largest event time seen so far, in input order, across batches. A record is late for
a window when ``window end + grace <= stream time`` at the moment it arrives; it is dropped from
that window and counted (logged per batch, total kept in state). Because stream time advances
record by record, which records are late does not depend on how the input was cut into batches.

Emission: ``changes`` emits the window's new values whenever they change (like ``EMIT
CHANGES``); ``final`` emits each window once, when it closes (``EMIT FINAL``). A closed window's
state is dropped either way, so state holds open windows only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .aggregates import Agg, to_python
from .errors import OperatorError, PipelineDefinitionError
from .operators import BatchScope, Operator
from .state_tables import CHANGE_COLUMN, OLD_COLUMN, GroupAggregate, nullable_array, without_nulls

log = logging.getLogger(__name__)

START, END = "window_start", "window_end"
_CLOCK = "__clock__"  # the operator's own state key for stream time and open windows


@dataclass(frozen=True)
class Window:
    """``size`` (and ``advance`` for hopping) over event-time column ``time``."""

    time: str
    size: pd.Timedelta
    advance: pd.Timedelta
    grace: pd.Timedelta

    def __post_init__(self) -> None:
        if self.size <= pd.Timedelta(0) or self.advance <= pd.Timedelta(0):
            raise PipelineDefinitionError("window size and advance must be positive")
        if self.advance > self.size:
            raise PipelineDefinitionError("a hopping window's advance cannot exceed its size")
        if self.size % self.advance != pd.Timedelta(0):
            raise PipelineDefinitionError("a hopping window's size must be a multiple of its advance")
        if self.grace < pd.Timedelta(0):
            raise PipelineDefinitionError("grace must not be negative")


def tumbling(time: str, size: str, grace: str = "0s") -> Window:
    """Back-to-back windows of ``size`` (``"1min"``, ``"10s"``…) on column ``time``."""
    return Window(time, pd.Timedelta(size), pd.Timedelta(size), pd.Timedelta(grace))


def hopping(time: str, size: str, advance: str, grace: str = "0s") -> Window:
    """Overlapping windows of ``size`` starting every ``advance``; a record is in each."""
    return Window(time, pd.Timedelta(size), pd.Timedelta(advance), pd.Timedelta(grace))


@dataclass(frozen=True)
class _EventTimeAggregate(Operator):
    """What window and session aggregations share: keys, aggregates, emission mode, and a clock
    (stream time, open windows, late count) kept in the operator's state."""

    name: str
    keys: tuple[str, ...]
    window: Any
    aggs: tuple[tuple[str, Agg], ...]
    emit: str = "changes"

    def __post_init__(self) -> None:
        if self.emit not in ("changes", "final"):
            raise PipelineDefinitionError(f"emit must be 'changes' or 'final', not {self.emit!r}")

    @property
    def table_keys(self) -> tuple[str, ...]:
        return self.keys + (START,)

    def _clock(self, scope: BatchScope, frame: pd.DataFrame):
        """The operator's state and its clock; the frame must hold the event-time column."""
        if self.window.time not in frame.columns:
            raise OperatorError(f"pipeline {scope.pipeline!r}, operator {self.name!r}: no event "
                                f"time column {self.window.time!r} in the data")
        store = scope.store.operator(self.name, initial=None)
        return store, store.get(_CLOCK) or {"time": None, "open": [], "late": 0}


@dataclass(frozen=True)
class WindowAggregate(_EventTimeAggregate):
    """Aggregates per key and window; see the module docstring for the rules."""

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        store, clock = self._clock(scope, frame)
        rows, late, stream_time = self._assign(without_nulls(frame, [self.window.time]),
                                               clock["time"])
        if late:
            log.warning("%s.%s batch %d: %d late record(s) dropped (window end + grace <= stream "
                        "time)", scope.pipeline, self.name, scope.batch_id, late)
        inner = GroupAggregate(name=self.name, keys=self.table_keys, aggs=self.aggs)
        touched, folded = inner.fold(scope, rows)
        opened = {tuple(key) for key in clock["open"]} | set(touched)
        wait = _ms(self.window.size) + _ms(self.window.grace)
        closed = sorted(k for k in opened if stream_time is not None and k[-1] + wait <= stream_time)
        finals = self._close(store, inner, closed)
        store.set(_CLOCK, {"time": stream_time, "open": sorted(map(list, opened - set(closed))),
                           "late": clock["late"] + late})
        # in final mode the per-window change rows would only be thrown away
        out = inner.changes(touched, folded) if self.emit == "changes" else finals
        return self._with_bounds(out)

    def _assign(self, frame: pd.DataFrame, time: int | None) -> tuple[pd.DataFrame, int, int | None]:
        """Rows exploded to one per (record, window), late ones removed; the late count; the
        stream time after the batch (epoch milliseconds)."""
        if frame.empty:
            return frame.assign(**{START: pd.Series(dtype="int64")}), 0, time
        ms = _epoch_ms(frame[self.window.time])
        running = np.maximum.accumulate(ms)
        before = np.concatenate([[time if time is not None else np.iinfo(np.int64).min],
                                 running[:-1]])
        if time is not None:
            before = np.maximum(before, time)
        advance, size, grace = _ms(self.window.advance), _ms(self.window.size), _ms(self.window.grace)
        # only what the aggregation reads: copying whole rows per window was a large part of it
        read = dict.fromkeys([*self.keys, *(a.column for _, a in self.aggs if a.column)])
        frame = frame[[column for column in read if column in frame.columns]]  # fold names any missing
        parts, late = [], 0
        for hop in reversed(range(size // advance)):  # earliest window first
            start = (ms // advance) * advance - hop * advance
            ontime = start + size + grace > before
            on = int(ontime.sum())
            late += len(ontime) - on
            parts.append(frame.assign(**{START: start}) if on == len(ontime)
                         else frame[ontime].assign(**{START: start[ontime]}))
        # input order, window order within (a tumbling window has one part, already in order)
        rows = parts[0] if len(parts) == 1 else pd.concat(parts).sort_index(kind="stable")
        stream_time = int(running[-1]) if time is None else max(int(running[-1]), time)
        return rows, late, stream_time

    def _close(self, store, inner: GroupAggregate, closed: list[tuple]) -> pd.DataFrame:
        """Final rows of the windows that just closed; their state is dropped."""
        states = store.get_values(closed)
        shown = [(key, state["acc"]) for key, state in zip(closed, states)
                 if state and state.get("visible")]
        store.delete_many(closed)
        # a closing window is an insert of its final values, never shown before
        return inner.inserts([key for key, _ in shown], [acc for _, acc in shown])

    def _with_bounds(self, out: pd.DataFrame) -> pd.DataFrame:
        starts = pd.to_datetime(out[START].astype("int64"), unit="ms", utc=True)
        position = out.columns.get_loc(START)
        out = out.drop(columns=[START])
        out.insert(position, START, starts)
        out.insert(position + 1, END, starts + self.window.size)
        return out.reset_index(drop=True)


@dataclass(frozen=True)
class Session:
    """Session windows on ``time``: a key's records closer than ``gap`` form one session."""

    time: str
    gap: pd.Timedelta
    grace: pd.Timedelta

    def __post_init__(self) -> None:
        if self.gap <= pd.Timedelta(0) or self.grace < pd.Timedelta(0):
            raise PipelineDefinitionError("a session gap must be positive and grace not negative")


def session(time: str, gap: str, grace: str = "0s") -> Session:
    """Sessions on column ``time`` that close after ``gap`` of inactivity (plus ``grace``)."""
    return Session(time, pd.Timedelta(gap), pd.Timedelta(grace))


@dataclass(frozen=True)
class SessionAggregate(_EventTimeAggregate):
    """Aggregates per key and session. A record within ``gap`` of a key's open sessions joins
    them (merging sessions it bridges); otherwise it opens a session ``[ts, ts]``, unless that
    would already be closed (``ts + gap + grace <= stream time``): then it is late, dropped and
    counted. A session closes when ``end + gap + grace <= stream time``. ``window_start`` and
    ``window_end`` are the first and last event times (both inclusive, as in ksqlDB). In
    ``changes`` mode a merge deletes the rows of the sessions it absorbed. Records are folded one
    by one (sessions are inherently sequential), so this operator is not vectorized.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(agg.kind == "udf" for _, agg in self.aggs):
            raise PipelineDefinitionError("user aggregates cannot merge sessions; use the built-in ones")

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        store, clock = self._clock(scope, frame)
        frame = without_nulls(frame, [self.window.time, *self.keys])
        ms = _epoch_ms(frame[self.window.time]).tolist()
        keys = [tuple(to_python(v) for v in row) for row in frame[list(self.keys)].itertuples(index=False)]
        unique = list(dict.fromkeys(keys))
        sessions = dict(zip(unique, store.get_values(unique)))
        gap, grace = _ms(self.window.gap), _ms(self.window.grace)
        time, late, changes = clock["time"], 0, []
        for key, ts, row in zip(keys, ms, frame.to_dict("records")):
            if sessions[key] is None:
                sessions[key] = []
            # sessions closed by stream time (even if not yet emitted) take no more records, so
            # the outcome does not depend on where batches were cut
            touching = [s for s in sessions[key] if s[0] - gap <= ts <= s[1] + gap
                        and (time is None or s[1] + gap + grace > time)]
            if not touching and time is not None and ts + gap + grace <= time:
                late += 1
                continue
            acc = None
            for old in sorted(touching):
                acc = old[2] if acc is None else self._merge(acc, old[2])
                sessions[key].remove(old)
                changes.append(("delete", key, old))
            merged = [min([ts] + [s[0] for s in touching]), max([ts] + [s[1] for s in touching]),
                      self._add(acc, row)]
            sessions[key].append(merged)
            changes.append(("upsert", key, merged))
            time = ts if time is None else max(time, ts)
        if late:
            log.warning("%s.%s batch %d: %d late record(s) dropped (session closed)",
                        scope.pipeline, self.name, scope.batch_id, late)
        opened = {tuple(k) for k in clock["open"]} | {k for k, s in sessions.items() if s}
        finals = self._close(store, sessions, opened, time, gap + grace)
        for key, value in sessions.items():
            store.set(key, value) if value else store.delete(key)
        still_open = sorted(list(k) for k in opened if sessions.get(k))
        store.set(_CLOCK, {"time": time, "open": still_open, "late": clock["late"] + late})
        rows = self._rows(changes) if self.emit == "changes" else finals
        columns = [*self.keys, START, END, *(n for n, _ in self.aggs), CHANGE_COLUMN, OLD_COLUMN]
        out = pd.DataFrame(rows, columns=columns)
        for name, agg in self.aggs:  # nullable dtypes, as the other aggregations emit
            out[name] = nullable_array(agg, out[name].tolist())
        return _timestamps(out)

    def _add(self, acc: dict | None, row: dict) -> dict:
        acc = acc or {}
        out = {}
        for name, agg in self.aggs:
            value = row.get(agg.column) if agg.column else None
            missing = agg.column is not None and (value is None or value != value)
            part = _one_record_partial(agg, value, missing)
            out[name] = agg.combine(acc.get(name), part)
        return out

    def _merge(self, left: dict, right: dict) -> dict:
        # an accumulator folds into another like a batch partial does
        return {name: agg.combine(left.get(name), right.get(name)) if right.get(name) is not None
                else left.get(name) for name, agg in self.aggs}

    def _values(self, acc: dict) -> dict:
        return {name: agg.result(acc.get(name)) for name, agg in self.aggs}

    def _rows(self, changes: list) -> list[dict]:
        """Net changes of the batch: sessions absorbed by a later merge show as deletes only."""
        final: dict[tuple, tuple] = {}
        for change, key, sess in changes:
            final[(key, sess[0])] = (change, key, sess)
        rows = []
        for change, key, sess in final.values():
            values = self._values(sess[2]) if change == "upsert" else {n: None for n, _ in self.aggs}
            rows.append({**dict(zip(self.keys, key)), START: sess[0],
                         END: sess[1] if change == "upsert" else None, **values,
                         CHANGE_COLUMN: "update" if change == "upsert" else "delete",
                         OLD_COLUMN: None})
        return rows

    def _close(self, store, sessions: dict, opened: set, time: int | None, wait: int) -> list[dict]:
        rows = []
        for key in sorted(opened):
            held = sessions.get(key)
            if held is None:
                held = sessions[key] = store.get(key) or []
            for sess in sorted(held):
                if time is not None and sess[1] + wait <= time:
                    held.remove(sess)
                    rows.append({**dict(zip(self.keys, key)), START: sess[0], END: sess[1],
                                 **self._values(sess[2]), CHANGE_COLUMN: "insert", OLD_COLUMN: None})
        return rows


def _one_record_partial(agg: Agg, value: Any, missing: bool) -> Any:
    """What one record contributes, in the shape of a batch partial."""
    value = to_python(value)
    if agg.kind == "count":
        return 0 if missing else 1
    if agg.kind == "avg":
        return (None, 0) if missing else (value, 1)
    if agg.kind == "collect_list":
        return [] if missing else [value]
    return None if missing else value


def _ms(delta: pd.Timedelta) -> int:
    return int(delta / pd.Timedelta(milliseconds=1))


def _epoch_ms(times: pd.Series) -> np.ndarray:
    """Event times as epoch milliseconds (naive times are UTC). Datetime columns convert
    directly: ``pd.to_datetime`` on them first scanned the values to decide about caching."""
    if not (pd.api.types.is_datetime64_dtype(times) or isinstance(times.dtype, pd.DatetimeTZDtype)):
        times = pd.to_datetime(times, utc=True)
    return times.dt.as_unit("ns").array.asi8 // 1_000_000


def _timestamps(out: pd.DataFrame) -> pd.DataFrame:
    for column in (START, END):
        out[column] = pd.to_datetime(out[column].astype("Int64"), unit="ms", utc=True)
    return out.reset_index(drop=True)
