"""Event-time windows over a keyed aggregation: tumbling and hopping, with a grace period.

Semantics (Kafka Streams / ksqlDB): windows are ``[start, end)`` aligned to the epoch; a hopping
window that would start before the epoch does not exist (a record at second 5 is in the 10 s
windows starting at 0 only, not in one starting at -5). Stream
time is the largest event time seen so far, in input order, across batches. A record is late for
a window when ``window end + grace <= stream time`` at the moment it arrives; it is dropped from
that window and counted (logged per batch, total kept in state). Because stream time advances
record by record, which records are late does not depend on how the input was cut into batches.

Emission: ``changes`` emits the window's new values whenever they change (like ``EMIT
CHANGES``); ``final`` emits each window once, when it closes (``EMIT FINAL``). A closed window's
state is dropped either way, so state holds open windows only, each under its keys and start
(its keys own it: distributed mode runs it where their rows are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from state import OperatorState

from ..columns import WATERMARK_COLUMN
from ..context import BatchScope
from ..errors import PipelineDefinitionError
from .event_time import END, START, EventTimeAggregate, epoch_ms, to_ms
from .grouped import GroupAggregate


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

    @property
    def spec(self) -> str:
        """Which windows it makes, as recorded with a checkpoint: grace and the event-time
        column aside, which change no stored window.

        >>> tumbling("ts", "1min").spec
        'windows of 60000 ms every 60000 ms'
        """
        return (f"windows of {self.size // pd.Timedelta('1ms')} ms every "
                f"{self.advance // pd.Timedelta('1ms')} ms")


def tumbling(time: str, size: str, grace: str = "0s") -> Window:
    """Back-to-back windows of ``size`` (``"1min"``, ``"10s"``…) on column ``time``."""
    return Window(time, pd.Timedelta(size), pd.Timedelta(size), pd.Timedelta(grace))


def hopping(time: str, size: str, advance: str, grace: str = "0s") -> Window:
    """Overlapping windows of ``size`` starting every ``advance``; a record is in each."""
    return Window(time, pd.Timedelta(size), pd.Timedelta(advance), pd.Timedelta(grace))


@dataclass(frozen=True)
class WindowAggregate(EventTimeAggregate):
    """Aggregates per key and window; see the module docstring for the rules."""

    def apply(self, scope: BatchScope, frame: pd.DataFrame) -> pd.DataFrame:
        store, clock = self.clock(scope)
        events = self.timed(frame, scope.where(self.name))
        ms = epoch_ms(events[self.window.time])
        before, stream_time = self.stream_times(scope, events, ms, clock)
        rows, late = self._assign(events, ms, before)
        inner = GroupAggregate(name=self.name, keys=self.table_keys, aggs=self.aggs,
                               having=self.having, per_record=self.per_record)
        per_record = inner.apply(scope, rows) if self.per_record else None
        touched, folded = inner.fold(scope, rows) if per_record is None else ([], [])
        wait = to_ms(self.window.size) + to_ms(self.window.grace)
        closed = sorted(key for key in self.open_keys(store)
                        if stream_time is not None and key[-1] + wait <= stream_time)
        finals = self._close(store, inner, closed)
        self.tick(scope, store, clock, stream_time, late)
        # in final mode the per-window change rows would only be thrown away
        out = finals if self.emit == "final" else (
            per_record if per_record is not None else inner.changes(touched, folded))
        return self._with_watermark(self._with_bounds(out), stream_time)

    def owner(self, state_key: tuple) -> Any:
        return self.state_key(state_key[:-1])  # (keys…, window start): the keys own it

    def _assign(self, frame: pd.DataFrame, ms: np.ndarray,
                before: np.ndarray) -> tuple[pd.DataFrame, int]:
        """Rows exploded to one per (record, window), late ones removed, and the late count;
        ``ms`` is each record's event time, ``before`` the stream time before it (epoch ms)."""
        if frame.empty:
            return frame.assign(**{START: pd.Series(dtype="int64")}), 0
        advance, size, grace = to_ms(self.window.advance), to_ms(self.window.size), to_ms(self.window.grace)
        # only what the aggregation reads: copying whole rows per window was a large part of it
        read = dict.fromkeys([*self.keys, *(c for _, a in self.aggs for c in a.reads)])
        frame = frame[[column for column in read if column in frame.columns]]  # fold names any missing
        parts, late = [], 0
        for hop in reversed(range(size // advance)):  # earliest window first
            start = (ms // advance) * advance - hop * advance
            exists = start >= 0  # a hopping window that would start before the epoch is none
            ontime = exists & (start + size + grace > before)
            on = int(ontime.sum())
            late += int(exists.sum()) - on
            parts.append(frame.assign(**{START: start}) if on == len(ontime)
                         else frame[ontime].assign(**{START: start[ontime]}))
        # input order, window order within (a tumbling window has one part, already in order)
        rows = parts[0] if len(parts) == 1 else pd.concat(parts).sort_index(kind="stable")
        return rows, late

    def _close(self, store: OperatorState, inner: GroupAggregate,
               closed: list[tuple]) -> pd.DataFrame:
        """Final rows of the windows that just closed; their state is dropped."""
        states = store.get_values(closed)
        shown = [(key, state["acc"]) for key, state in zip(closed, states)
                 if state and state.get("visible")]
        store.delete_many(closed)
        # a closing window is an insert of its final values, never shown before
        return inner.inserts([key for key, _ in shown], [acc for _, acc in shown])

    def _with_watermark(self, out: pd.DataFrame, stream_time: int | None) -> pd.DataFrame:
        """A FINAL tumbling window's rows with :data:`WATERMARK_COLUMN`: the start of the
        earliest window still open (every later row starts there or after). A window over
        these rows closes by it as Spark's chained windows do in the batch whose stream time
        passes their end, rather than when a window ending there is emitted, which may be a
        batch later."""
        if self.emit != "final" or self.window.advance != self.window.size or out.empty \
                or stream_time is None:
            return out
        size = to_ms(self.window.size)
        earliest = (stream_time - to_ms(self.window.grace)) // size * size
        return out.assign(**{WATERMARK_COLUMN: pd.Timestamp(earliest, unit="ms", tz="UTC")})

    def _with_bounds(self, out: pd.DataFrame) -> pd.DataFrame:
        starts = pd.to_datetime(out[START].astype("int64"), unit="ms", utc=True)
        position = out.columns.get_loc(START)
        out = out.drop(columns=[START])
        out.insert(position, START, starts)
        out.insert(position + 1, END, starts + self.window.size)
        return out.reset_index(drop=True)
